"""``python -m floydd.tui``: what ``floyd top`` runs."""

from floydd.tui.app import main

main()
