"""Step search with a process reward model: the shared step loop and its paths, and the
searches built on it (beam, particle filtering, DVTS, step rejection).
"""
