"""The Responses API: requests translated into the chat pipeline, answers rendered back,
stored responses.
"""
