"""Thin views: read a tenant-scoped queryset or call a service, render a template. Polled
fragments (htmx) live next to the page they refresh."""
