"""The plugin's configuration: the settings model, the TOML reader, reloads and host checks."""
