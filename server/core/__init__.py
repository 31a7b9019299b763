"""Settings, database engine, migrations, security and error answers shared by the service."""
