"""usertcp.drill."""
