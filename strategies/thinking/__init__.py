"""Strategies that shape one trajectory's thinking: Elastic Reasoning and budget guidance."""
