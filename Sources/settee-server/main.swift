print("settee-server: not yet wired")
