"""usertcp.bench."""
