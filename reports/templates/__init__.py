"""The report's Jinja2 templates, installed as the package `harness.templates` (pyproject's
package-dir) so that an installed harness finds them with importlib.resources."""
