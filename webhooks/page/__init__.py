"""The live slice-map page of `dynmig serve` (`--page=true`): read-only HTML over plain HTTP.

`view` reads serve's own fleet (the scheduler's cache) into the slice-map model, `render` draws it
as HTML with inline SVG (every name escaped), `stream` keeps it live over server-sent events, and
`app` serves it with a strict Content-Security-Policy and no external assets.
"""
