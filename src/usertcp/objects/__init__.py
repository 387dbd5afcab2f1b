"""usertcp.objects."""
