"""usertcp.net."""
