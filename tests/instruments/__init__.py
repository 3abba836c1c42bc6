"""Each instrument's profile on its simulator, through the doors."""
