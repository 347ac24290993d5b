"""Root conftest: fixtures live in tests/plugins/, one module per piece of real infrastructure."""

pytest_plugins = [
    "plugins.postgres",
    "plugins.cluster",
    "plugins.operator",
    "plugins.kueue",
    "plugins.runapi",
    "plugins.ordering",
]
