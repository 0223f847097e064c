"""``floyd top``: a Textual TUI over the daemon API (see :mod:`floydd.tui.app`).

Only :mod:`floydd.client` (and :mod:`floydd.errors`, :mod:`floydd.config`,
:func:`floydd.reach.connect`, :mod:`floydd.present`) is used to reach the daemon; nothing in the
core imports this package, so ``floyd`` never loads Textual.
"""
