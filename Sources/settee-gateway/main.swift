import SetteeGateway

print("settee-gateway: not yet")
