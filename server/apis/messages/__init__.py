"""Anthropic's Messages API: requests translated into the chat pipeline, answers and errors
rendered back.
"""
