"""The process around the requests: start and stop (lifecycle, draining), HTTP timeouts,
the event loop's lag and GC pauses watched, logs and Prometheus metrics.
"""
