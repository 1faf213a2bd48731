"""What users run on their side (imports nothing from thinkgate)."""
