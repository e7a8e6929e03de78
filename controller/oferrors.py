"""OpenFlow 1.3 error messages decoded for people: the error's type and code by name, and the
request it answers (its message type and xid, from the first bytes of the request the switch
copies into the error, and what the controller said it was when it sent it).

Pure: only the framework's OpenFlow 1.3 constants (no connection, no event loop).
"""
from __future__ import annotations

import struct

from controller.ofp import ofproto_v1_3 as ofp

#: ofp_error_type -> the prefix of its codes' names (OpenFlow 1.3.5, section 7.4.4).
_CODE_PREFIX = {
    "OFPET_HELLO_FAILED": "OFPHFC_", "OFPET_BAD_REQUEST": "OFPBRC_", "OFPET_BAD_ACTION": "OFPBAC_",
    "OFPET_BAD_INSTRUCTION": "OFPBIC_", "OFPET_BAD_MATCH": "OFPBMC_", "OFPET_FLOW_MOD_FAILED": "OFPFMFC_",
    "OFPET_GROUP_MOD_FAILED": "OFPGMFC_", "OFPET_PORT_MOD_FAILED": "OFPPMFC_", "OFPET_TABLE_MOD_FAILED": "OFPTMFC_",
    "OFPET_QUEUE_OP_FAILED": "OFPQOFC_", "OFPET_SWITCH_CONFIG_FAILED": "OFPSCFC_",
    "OFPET_ROLE_REQUEST_FAILED": "OFPRRFC_", "OFPET_METER_MOD_FAILED": "OFPMMFC_",
    "OFPET_TABLE_FEATURES_FAILED": "OFPTFFC_",
}
_TYPES = {getattr(ofp, n): n for n in _CODE_PREFIX}
_MSG_TYPES = {getattr(ofp, n): n for n in dir(ofp) if n.startswith("OFPT_")}
#: struct ofp_header: version, type, length, xid
_HEADER = struct.Struct("!BBHI")


def _code_name(type_name: str | None, code: int) -> str:
    prefix = _CODE_PREFIX.get(type_name or "")
    if prefix:
        for n in dir(ofp):
            if n.startswith(prefix) and getattr(ofp, n) == code:
                return n
    return str(code)


def describe_error(err_type: int, code: int, data: bytes, sent: dict[int, str] | None = None) -> dict:
    """An OpenFlow 1.3 error decoded.

    Args:
        err_type, code: the error message's type and code.
        data: its data: at least the first 64 bytes of the failed request (so its header).
        sent: xid -> what the controller sent with that xid, when it kept a note.

    Returns: ``{"type", "code" (names, or the number when unknown), "type_number", "code_number",
    "request_type" (e.g. OFPT_FLOW_MOD, or None when ``data`` holds no header), "request_xid",
    "request" (the controller's note, or None), "text" (one line with all of it)}``.
    """
    type_name = _TYPES.get(err_type)
    code_name = _code_name(type_name, code)
    req_type = req_xid = None
    if len(data) >= _HEADER.size:
        _version, t, _length, req_xid = _HEADER.unpack_from(data)
        req_type = _MSG_TYPES.get(t, str(t))
    note = (sent or {}).get(req_xid) if req_xid is not None else None
    text = (f"{type_name or err_type} {code_name} (type={err_type} code={code}) answering "
            + (f"{req_type} xid {req_xid}" if req_type else "an unidentified request")
            + (f": {note}" if note else ""))
    return {"type": type_name or str(err_type), "code": code_name, "type_number": err_type, "code_number": code,
            "request_type": req_type, "request_xid": req_xid, "request": note, "text": text}
