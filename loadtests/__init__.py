"""Load tests: locustfile, k6 script, report builder."""
