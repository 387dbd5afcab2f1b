"""usertcp.apps."""
