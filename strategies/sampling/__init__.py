"""Strategies that draw several samples and choose: the shared sampler (`base`), self-
consistency, best-of-n, best-of-majority, DeepConf, the adaptive draw and vote, the PRM
scorer.
"""
