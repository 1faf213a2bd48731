"""Calibration tools users run (`thinkgate calibrate pets|auto`), part of the runtime:
nothing here imports the benchmarks or the testbed.
"""
