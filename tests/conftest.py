pytest_plugins = ["plugins.cluster"]
