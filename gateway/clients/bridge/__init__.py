"""`acp-gateway connect`: an ACP agent on stdio that is a gateway session, for editors (rules.py decides, link.py
does the I/O)."""
