"""Keeping datasets' versions and jobs' code on R boxes, and this box's store in step."""
