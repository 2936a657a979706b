"""Webhook deliveries in: the parts of each payload hangar reads, checked once
(payloads.py); the group commit that stores a delivery before GitHub hears 2xx
(deliveries.py); handing stored deliveries to the handlers' router (dispatch.py); and
catching up on deliveries hangar missed (redelivery.py)."""
