"""usertcp.api."""
