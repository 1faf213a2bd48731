"""Who may call and how much: API keys and their tenants (one check per request, `auth`),
admission (the server's caps shared fairly), each tenant's window of recent use, the
keys CLI.
"""
