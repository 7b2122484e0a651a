"""Instruction following (work in progress)."""
