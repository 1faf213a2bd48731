"""The request path every generation route runs: budgets and effort resolved, the answer
fields checked, admission, the strategy task, its stream, and the engine as one request
sees it (each call fitted to the request's ceiling and clock).
"""
