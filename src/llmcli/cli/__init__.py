"""Typer commands: parse flags, build a request, hand it down, render the result."""
