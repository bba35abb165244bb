"""SFC recipe engine: the default recipe interpreter (IEC 61131-3 Sequential Function Charts)."""
