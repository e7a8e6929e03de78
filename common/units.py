"""Sizes every layer shares (pure constants; nothing here touches the machine or a scenario)."""

#: A full-size Ethernet frame as a veth and the shapers count it: 1500 B MTU + 14 B header.
FRAME_BYTES = 1514
