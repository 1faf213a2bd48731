"""Server-wide resources strategies use (the PRM, scorers, PETS tables, the `auto`
table...) and their start-up: `builders` finds and runs the resource builders; one
module per builder.
"""
