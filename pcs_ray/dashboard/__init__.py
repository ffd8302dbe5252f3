"""The dashboard's pages: HTML and SVG built from plain view dicts (no Ray, no web server).

The coordinator serves them (``pcs_ray.coordinator.dashboard_routes``) from a
snapshot of its state; ``pcs-ray report --html`` builds the same pages from a
journal. Everything here is a pure function of the view it is given, so a
page can be rendered outside the coordinator's lock and tested without one.
Live parts refresh through htmx (vendored in ``static/``, 0BSD), which polls
each page's fragment URL; the fragment is the same HTML the page embeds.
"""
