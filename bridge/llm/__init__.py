"""Model providers behind one narrow seam."""
