"""The HTML/PDF report: its context built from the pipeline's files, the first page, the
measures sections and plots, the checklist, and rendering (Jinja2 + WeasyPrint)."""
