"""fakehub: a local stand-in for GitHub, over real HTTP and real git.

Start it with `fakehub.testing.running_fakehub(data_dir)` (tests, demo) or
`fakehub.cli.main(["--port", "8080"])` (alone); see docs/fakehub.md.
"""
