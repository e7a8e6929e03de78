"""The fabriclab controller: an os-ken (Ryu API) app plus the data-plane
helpers (tc through netlink, OVS, ethtool) and pure routing policy."""
