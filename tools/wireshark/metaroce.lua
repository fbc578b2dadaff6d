-- Wireshark dissector for the MetaRoCE wire protocol, version 1
-- (docs/spec/metaroce-v0.1.md, section 3; trimmed packets, section 9.3).
-- Wireshark 4.0 Lua API. Load with `-X lua_script:metaroce.lua` or copy into
-- the personal Lua plugins folder (tools/wireshark/README.md).
--
-- Every length is checked before a byte is read: malformed input ends in an
-- expert-info error, never in a Lua error (the pcall at the bottom is only a
-- safety net, reported as a dissector bug).

local metaroce = Proto("metaroce", "MetaRoCE")

local DEFAULT_UDP_PORT = 4792 -- ENC-2
local DEFAULT_TRIMMED_DSCP = 63 -- TRIM-1
local VERSION = 1
local BH_LEN, MH_LEN, RH_LEN, IMM_LEN, ICRC_LEN = 16, 12, 16, 4, 4
local ACK_FIXED_LEN, SACK_WORD_LEN, MAX_SACK_WORDS = 20, 8, 16
local MIN_DATAGRAM = BH_LEN + ICRC_LEN -- BAD-1: nothing is shorter than a PROBE

local FLAG_PC, FLAG_AR, FLAG_RESERVED = 0x08, 0x04, 0x03
local ECHO_CE, ECHO_DUP, ECHO_PROBE, ECHO_TRIMMED = 0x01, 0x02, 0x04, 0x08

---------------------------------------------------------------- value tables

local opcode_names = {
  [0x01] = "WRITE", [0x02] = "WRITE_IMM", [0x03] = "SEND", [0x04] = "SEND_IMM",
  [0x05] = "READ_REQ", [0x06] = "READ_RESP", [0x10] = "ACK", [0x11] = "NAK",
  [0x12] = "PROBE", [0x20] = "CONNECT_REQ", [0x21] = "CONNECT_ACCEPT",
  [0x22] = "CONNECT_REJECT", [0x23] = "DISCONNECT", [0x24] = "DISCONNECT_ACK",
}

-- Which headers each opcode carries (3.2); a receiver knows them from byte 1.
local layouts = {
  [0x01] = { mh = true, rh = true, payload = true },
  [0x02] = { mh = true, rh = true, imm = true, payload = true },
  [0x03] = { mh = true, payload = true },
  [0x04] = { mh = true, imm = true, payload = true },
  [0x05] = { mh = true, rh = true },
  [0x06] = { mh = true, payload = true },
  [0x10] = { body = "ack", body_len = ACK_FIXED_LEN },
  [0x11] = { body = "nak", body_len = 16 },
  [0x12] = {},
  [0x20] = { body = "connect", body_len = 24 },
  [0x21] = { body = "connect", body_len = 24 },
  [0x22] = { body = "connect", body_len = 24 },
  [0x23] = { body = "disconnect", body_len = 8 },
  [0x24] = { body = "disconnect", body_len = 8 },
}

-- Packets not sent on one of the sender's data paths: BH path_tag 0, psn 0,
-- AR clear, all three ignored on receipt (3.3).
local not_on_a_path = {
  [0x10] = true, [0x11] = true, [0x20] = true, [0x21] = true, [0x22] = true, [0x23] = true,
  [0x24] = true,
}

local nak_code_names = {
  [0x01] = "RNR", [0x02] = "REMOTE_BAD_KEY", [0x03] = "REMOTE_OUT_OF_BOUNDS",
  [0x04] = "REMOTE_ACCESS_DENIED", [0x05] = "REMOTE_LENGTH_ERROR",
  [0x06] = "REMOTE_INVALID_REQUEST", [0x07] = "REMOTE_OPERATION_ERROR",
}

-- Appendix A; CONNECT_REJECT uses 0x47, 0x48 and 0x4a (CONN-4), and the
-- statuses that fail a connection (failed_by, CONN-3).
local status_names = {
  [0x00] = "kOk", [0x01] = "kRnr", [0x02] = "kRemoteBadKey", [0x03] = "kRemoteOutOfBounds",
  [0x04] = "kRemoteAccessDenied", [0x05] = "kRemoteLengthError",
  [0x06] = "kRemoteInvalidRequest", [0x07] = "kRemoteOperationError",
  [0x40] = "kLocalProtection", [0x41] = "kInvalidArgument",
  [0x42] = "kQueueFull", [0x43] = "kNoSuchConnection", [0x44] = "kNotConnected",
  [0x45] = "kFlushed", [0x46] = "kPeerUnreachable", [0x47] = "kConnectRefused",
  [0x48] = "kVersionMismatch", [0x49] = "kConnectTimeout", [0x4a] = "kResourceExhausted",
  [0x4b] = "kPeerClosed", [0x4c] = "kRnrRetryExceeded",
}

-- CONN-8: what puts a connection in ERROR (its DISCONNECT's reason): a
-- fatal NAK's code received or sent (0x02-0x07), kLocalProtection,
-- kPeerUnreachable, kRnrRetryExceeded. CONN-3 answers a repeated request to
-- such a connection with a REJECT whose code is that status.
local failed_by = {
  [0x02] = true, [0x03] = true, [0x04] = true, [0x05] = true, [0x06] = true, [0x07] = true,
  [0x40] = true, [0x46] = true, [0x4c] = true,
}

-- CONN-8: 0 says the connection was ESTABLISHED; any other value is the
-- status (appendix A) that failed it.
local disconnect_reason_names = {}
for k, v in pairs(status_names) do disconnect_reason_names[k] = v end
disconnect_reason_names[0x00] = "none (closed while ESTABLISHED)"

local ICRC_BAD, ICRC_GOOD, ICRC_UNVERIFIED = 0, 1, 2
local icrc_status_names = {
  [ICRC_BAD] = "Bad", [ICRC_GOOD] = "Good", [ICRC_UNVERIFIED] = "Unverified",
}

---------------------------------------------------------------- fields

local pf = {
  -- Base Header (3.3)
  version = ProtoField.uint8("metaroce.version", "Version", base.DEC, nil, 0xF0),
  flags = ProtoField.uint8("metaroce.flags", "Flags", base.HEX, nil, 0x0F),
  flag_pc = ProtoField.bool("metaroce.flags.pc", "Payload covered (PC)", 8, nil, FLAG_PC),
  flag_ar = ProtoField.bool("metaroce.flags.ar", "Ack requested (AR)", 8, nil, FLAG_AR),
  flag_reserved = ProtoField.uint8("metaroce.flags.reserved", "Reserved", base.HEX, nil,
    FLAG_RESERVED),
  opcode = ProtoField.uint8("metaroce.opcode", "Opcode", base.HEX, opcode_names),
  path_tag = ProtoField.uint16("metaroce.path_tag", "Path tag", base.HEX),
  path_generation = ProtoField.uint16("metaroce.path_tag.generation", "Generation", base.DEC, nil,
    0xFFE0),
  path_slot = ProtoField.uint16("metaroce.path_tag.slot", "Slot", base.DEC, nil, 0x001F),
  dst_conn = ProtoField.uint32("metaroce.dst_conn", "Destination connection id", base.HEX),
  psn = ProtoField.uint32("metaroce.psn", "PSN", base.HEX),
  tsval = ProtoField.uint32("metaroce.tsval", "TSval (ns)", base.HEX),
  -- Any connection id in the packet: dst_conn, or a body's src_conn. (A data
  -- packet names only its receiver's id; metaroce.stream takes both directions.)
  conn = ProtoField.uint32("metaroce.conn", "Connection id", base.HEX),
  entropy = ProtoField.uint16("metaroce.entropy", "Path entropy (UDP source port)", base.DEC),
  -- Message Header (3.5)
  msn = ProtoField.uint32("metaroce.msn", "MSN", base.DEC),
  offset = ProtoField.uint32("metaroce.offset", "Offset", base.DEC),
  msg_len = ProtoField.uint32("metaroce.msg_len", "Message length", base.DEC),
  -- RDMA Header (3.6) and immediate (3.7)
  rkey = ProtoField.uint64("metaroce.rkey", "Remote key", base.HEX),
  raddr = ProtoField.uint64("metaroce.raddr", "Remote address", base.HEX),
  imm = ProtoField.uint32("metaroce.imm", "Immediate data", base.HEX),
  payload_len = ProtoField.uint32("metaroce.payload_len", "Payload length", base.DEC),
  trimmed = ProtoField.bool("metaroce.trimmed", "Trimmed (payload cut by a switch)"),
  -- ICRC (3.8)
  icrc = ProtoField.uint32("metaroce.icrc", "ICRC", base.HEX),
  icrc_status = ProtoField.uint8("metaroce.icrc.status", "ICRC status", base.DEC,
    icrc_status_names),
  icrc_computed = ProtoField.uint32("metaroce.icrc.computed", "Computed ICRC", base.HEX),
  icrc_covered = ProtoField.uint32("metaroce.icrc.covered_len", "Bytes covered", base.DEC),
  -- ACK body (3.9)
  ack_cum_psn = ProtoField.uint32("metaroce.ack.cum_psn", "Cumulative PSN", base.HEX),
  ack_echo_psn = ProtoField.uint32("metaroce.ack.echo_psn", "Echo PSN", base.HEX),
  ack_echo_tsval = ProtoField.uint32("metaroce.ack.echo_tsval", "Echo TSval", base.HEX),
  ack_echo_path_tag = ProtoField.uint16("metaroce.ack.echo_path_tag", "Echo path tag", base.HEX),
  ack_echo_generation = ProtoField.uint16("metaroce.ack.echo_path_tag.generation", "Generation",
    base.DEC, nil, 0xFFE0),
  ack_echo_slot = ProtoField.uint16("metaroce.ack.echo_path_tag.slot", "Slot", base.DEC, nil,
    0x001F),
  ack_flags = ProtoField.uint8("metaroce.ack.flags", "Ack flags", base.HEX),
  ack_echo_ce = ProtoField.bool("metaroce.ack.flags.echo_ce", "ECHO_CE", 8, nil, ECHO_CE),
  ack_echo_dup = ProtoField.bool("metaroce.ack.flags.echo_dup", "ECHO_DUP", 8, nil, ECHO_DUP),
  ack_echo_probe = ProtoField.bool("metaroce.ack.flags.echo_probe", "ECHO_PROBE", 8, nil,
    ECHO_PROBE),
  ack_echo_trimmed = ProtoField.bool("metaroce.ack.flags.echo_trimmed", "ECHO_TRIMMED", 8, nil,
    ECHO_TRIMMED),
  ack_flags_reserved = ProtoField.uint8("metaroce.ack.flags.reserved", "Reserved", base.HEX, nil,
    0xF0),
  ack_sack_words = ProtoField.uint8("metaroce.ack.sack_words", "SACK words", base.DEC),
  ack_reserved = ProtoField.uint32("metaroce.ack.reserved", "Reserved", base.HEX),
  ack_sack = ProtoField.uint64("metaroce.ack.sack", "SACK word", base.HEX),
  ack_sack_psn = ProtoField.uint32("metaroce.ack.sack.psn", "SACKed PSN", base.HEX),
  ack_sack_count = ProtoField.uint32("metaroce.ack.sack.count", "PSNs SACKed", base.DEC),
  -- NAK body (3.10)
  nak_psn = ProtoField.uint32("metaroce.nak.nak_psn", "NAK PSN", base.HEX),
  nak_code = ProtoField.uint8("metaroce.nak.code", "Code", base.HEX, nak_code_names),
  nak_reserved = ProtoField.uint24("metaroce.nak.reserved", "Reserved", base.HEX),
  nak_msn = ProtoField.uint32("metaroce.nak.msn", "MSN", base.DEC),
  nak_cum_psn = ProtoField.uint32("metaroce.nak.cum_psn", "Cumulative PSN", base.HEX),
  -- Connection body (3.12)
  conn_src_conn = ProtoField.uint32("metaroce.connect.src_conn", "Source connection id", base.HEX),
  conn_initial_psn = ProtoField.uint32("metaroce.connect.initial_psn", "Initial PSN", base.HEX),
  conn_mtu = ProtoField.uint16("metaroce.connect.mtu", "MTU", base.DEC),
  conn_window_log2 = ProtoField.uint8("metaroce.connect.window_log2", "Window log2", base.DEC),
  conn_max_reads = ProtoField.uint8("metaroce.connect.max_reads", "Max reads", base.DEC),
  conn_code = ProtoField.uint8("metaroce.connect.code", "Code", base.HEX, status_names),
  conn_max_version = ProtoField.uint8("metaroce.connect.max_version", "Max version", base.DEC),
  -- CONNECT_REQ: the port the requester receives on, 0 for the request's source port (3.12).
  conn_reply_port = ProtoField.uint16("metaroce.connect.reply_port", "Reply port", base.DEC),
  conn_nonce = ProtoField.uint64("metaroce.connect.nonce", "Nonce", base.HEX),
  -- Disconnect body (3.13)
  disc_src_conn = ProtoField.uint32("metaroce.disconnect.src_conn", "Source connection id",
    base.HEX),
  -- CONN-8: 0, or the status that failed the connection at the closing end.
  disc_reason = ProtoField.uint8("metaroce.disconnect.reason", "Reason", base.HEX,
    disconnect_reason_names),
  disc_reserved = ProtoField.uint24("metaroce.disconnect.reserved", "Reserved", base.HEX),
  -- A datagram holding a GSO run (or a GRO batch): on the first packet's tree.
  gso_segments = ProtoField.uint32("metaroce.gso.segments", "Packets in the datagram", base.DEC),
  gso_segment_len = ProtoField.uint32("metaroce.gso.segment_len", "Segment size", base.DEC),
  -- One number per connection, both directions (like tcp.stream): learnt from
  -- the handshake, a DISCONNECT, or an ACK echoing a data packet or PROBE.
  stream = ProtoField.uint32("metaroce.stream", "Stream index", base.DEC),
  -- The last earlier frame that carried this PSN to the same connection.
  retrans_prev = ProtoField.framenum("metaroce.retransmission.prev_frame",
    "Retransmission of the PSN sent in frame", base.NONE, frametype.RETRANS_PREV),
}
local field_list = {}
for _, f in pairs(pf) do field_list[#field_list + 1] = f end
metaroce.fields = field_list

local ex = {
  truncated = ProtoExpert.new("metaroce.truncated", "Truncated packet (BAD-1)",
    expert.group.MALFORMED, expert.severity.ERROR),
  bad_version = ProtoExpert.new("metaroce.bad_version", "Unknown version (BAD-2)",
    expert.group.MALFORMED, expert.severity.ERROR),
  bad_opcode = ProtoExpert.new("metaroce.bad_opcode", "Unknown opcode (BAD-3)",
    expert.group.MALFORMED, expert.severity.ERROR),
  icrc_bad = ProtoExpert.new("metaroce.icrc_bad", "Bad ICRC (BAD-4)",
    expert.group.CHECKSUM, expert.severity.ERROR),
  icrc_unverified = ProtoExpert.new("metaroce.icrc_unverified", "ICRC not verified",
    expert.group.CHECKSUM, expert.severity.NOTE),
  bad_length = ProtoExpert.new("metaroce.bad_length",
    "Length inconsistent with the headers (BAD-5)",
    expert.group.MALFORMED, expert.severity.ERROR),
  bad_field = ProtoExpert.new("metaroce.bad_field", "Field out of range (BAD-6)",
    expert.group.MALFORMED, expert.severity.ERROR),
  reserved = ProtoExpert.new("metaroce.reserved_not_zero", "Reserved bits not zero",
    expert.group.PROTOCOL, expert.severity.WARN),
  trimmed = ProtoExpert.new("metaroce.trimmed_packet", "Payload trimmed by a switch (9.3)",
    expert.group.SEQUENCE, expert.severity.NOTE),
  not_captured = ProtoExpert.new("metaroce.not_captured",
    "Packet cut short by the capture snap length",
    expert.group.UNDECODED, expert.severity.NOTE),
  dissector_bug = ProtoExpert.new("metaroce.dissector_bug", "MetaRoCE dissector failure",
    expert.group.MALFORMED, expert.severity.ERROR),
  gso = ProtoExpert.new("metaroce.gso", "Several packets in one datagram (GSO or GRO)",
    expert.group.PROTOCOL, expert.severity.NOTE),
  unexpected = ProtoExpert.new("metaroce.unexpected_value",
    "A value the spec does not send (a receiver ignores the field or drops the packet)",
    expert.group.PROTOCOL, expert.severity.WARN),
  not_ect = ProtoExpert.new("metaroce.not_ect", "Not sent ECT(0) (ENC-4)",
    expert.group.PROTOCOL, expert.severity.WARN),
  retransmission = ProtoExpert.new("metaroce.retransmission", "Retransmission of a PSN",
    expert.group.SEQUENCE, expert.severity.NOTE),
  partial = ProtoExpert.new("metaroce.partial_payload",
    "Partial payload: neither the mtu nor the message's rest, nor trimmed (TRIM-5)",
    expert.group.MALFORMED, expert.severity.ERROR),
}
metaroce.experts = {
  ex.truncated, ex.bad_version, ex.bad_opcode, ex.icrc_bad, ex.icrc_unverified, ex.bad_length,
  ex.bad_field, ex.reserved, ex.trimmed, ex.not_captured, ex.dissector_bug, ex.gso, ex.partial,
  ex.unexpected, ex.not_ect, ex.retransmission,
}

metaroce.prefs.udp_port = Pref.uint("UDP port", DEFAULT_UDP_PORT,
  "UDP destination port of MetaRoCE traffic (ENC-2); more ports via Decode As")
metaroce.prefs.trimmed_dscp = Pref.uint("TRIMMED DSCP", DEFAULT_TRIMMED_DSCP,
  "IP DSCP a trimming switch gives a packet whose payload it cut (TRIM-1)")
metaroce.prefs.verify_icrc = Pref.bool("Verify ICRC", true,
  "Compute the CRC-32C and compare it with the trailer")

-- The trimming flag lives in the IP header, below us.
local ip_dscp = Field.new("ip.dsfield.dscp")
local ipv6_dscp = Field.new("ipv6.tclass.dscp")
local ip_ecn = Field.new("ip.dsfield.ecn")
local udp_length = Field.new("udp.length")
local ipv6_ecn = Field.new("ipv6.tclass.ecn")
local data_dissector = Dissector.get("data")

---------------------------------------------------------------- CRC-32C

-- Lua 5.2 (Wireshark 4.0) has bit32; later Lua builds keep Wireshark's `bit`.
-- BitOp's results are signed, hence the final modulo.
local bits = bit32 or bit
local band, bxor, rshift = bits.band, bits.bxor, bits.rshift

local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if band(c, 1) ~= 0 then c = bxor(rshift(c, 1), 0x82F63B78) else c = rshift(c, 1) end
  end
  crc_table[i] = c
end

-- The running CRC over bytes[from..to] (string positions), continuing `crc`.
local function crc32c_update(crc, bytes, from, to)
  for i = from, to do
    crc = bxor(crc_table[band(bxor(crc, bytes:byte(i)), 0xFF)], rshift(crc, 8))
  end
  return crc
end

local function crc32c_final(crc) return bxor(crc, 0xFFFFFFFF) % 4294967296 end

local function crc32c(bytes) return crc32c_final(crc32c_update(0xFFFFFFFF, bytes, 1, #bytes)) end
assert(crc32c("123456789") == 0xE3069283, "metaroce.lua: CRC-32C self-test failed")

---------------------------------------------------------------- helpers

local function hex(v) return string.format("0x%x", v) end

local function is_set(value, mask) return band(value, mask) ~= 0 end

-- Bit i of a 64-bit SACK word, from its two 32-bit halves.
local function sack_bit(lo, hi, i)
  if i < 32 then return is_set(lo, bits.lshift(1, i)) end
  return is_set(hi, bits.lshift(1, i - 32))
end

-- "0x1001,0x1003-0x1005" from a sorted PSN list; long lists are cut.
local function psn_ranges(psns)
  local parts, i = {}, 1
  while i <= #psns and #parts < 4 do
    local j = i
    while j < #psns and psns[j + 1] == (psns[j] + 1) % 4294967296 do j = j + 1 end
    parts[#parts + 1] = (j == i) and hex(psns[i]) or (hex(psns[i]) .. "-" .. hex(psns[j]))
    i = j + 1
  end
  if i <= #psns then parts[#parts + 1] = "..." end
  return table.concat(parts, ",")
end

local function trimmed_dscp_seen()
  local last
  for _, f in ipairs({ ip_dscp() }) do last = f end
  for _, f in ipairs({ ipv6_dscp() }) do last = f end
  return last ~= nil and last.value == metaroce.prefs.trimmed_dscp
end

-- One packet's decoding state, passed to each header's function.
-- `captured` is what the capture holds, `datagram` the UDP payload's true
-- length (they differ when the snap length, e.g. the simulator's, cut it).
-- The datagram's true length. Inside an ICMP error (a router's or the
-- peer's "port unreachable") Wireshark gives the quoted datagram only the
-- length quoted; its UDP header says how long it was.
local function datagram_length(tvb, pinfo)
  if pinfo.in_error_pkt then
    local last
    for _, f in ipairs({ udp_length() }) do last = f end
    if last ~= nil and last.value - 8 >= tvb:len() then return last.value - 8 end
  end
  return tvb:reported_len()
end

local function new_state(tvb, pinfo, tree, datagram)
  return {
    tvb = tvb, pinfo = pinfo, root = tree,
    captured = tvb:len(), datagram = datagram or tvb:reported_len(),
    -- A copy quoted in an ICMP error: decoded, but not a packet sent.
    quoted = pinfo.in_error_pkt,
    info = {}, suffix = {},
  }
end

local function captured(st, off, len) return off + len <= st.captured end

-- Bytes before the payload for an opcode's layout (3.2); an ACK's SACK words not included.
local function header_len(layout)
  return BH_LEN + (layout.mh and MH_LEN or 0) + (layout.rh and RH_LEN or 0) +
      (layout.imm and IMM_LEN or 0) + (layout.body_len or 0)
end

local function add_info(st, text) st.info[#st.info + 1] = text end

local function reserved_zero(st, item, value, what)
  if value ~= 0 then
    item:add_proto_expert_info(ex.reserved, what .. " is " .. hex(value) .. ", must be zero")
  end
end

---------------------------------------------------------------- headers

local function dissect_base_header(st, tree)
  local tvb = st.tvb
  local bh = tree:add(tvb(0, BH_LEN), "Base Header")
  local byte0 = tvb(0, 1):uint()
  bh:add(pf.version, tvb(0, 1))
  local flags_item = bh:add(pf.flags, tvb(0, 1))
  flags_item:add(pf.flag_pc, tvb(0, 1))
  st.ar_item = flags_item:add(pf.flag_ar, tvb(0, 1))
  local res_item = flags_item:add(pf.flag_reserved, tvb(0, 1))
  reserved_zero(st, res_item, band(byte0, FLAG_RESERVED), "Flag bits 1-0")
  bh:add(pf.opcode, tvb(1, 1))
  st.tag_item = bh:add(pf.path_tag, tvb(2, 2))
  if not not_on_a_path[tvb(1, 1):uint()] then
    -- Only a data packet or PROBE names a path (3.3); another's 0 split into
    -- "slot 0" would match a filter on slot 0.
    st.tag_item:add(pf.path_generation, tvb(2, 2))
    st.tag_item:add(pf.path_slot, tvb(2, 2))
  end
  st.dst_item = bh:add(pf.dst_conn, tvb(4, 4))
  bh:add(pf.conn, tvb(4, 4)):set_hidden()
  st.psn_item = bh:add(pf.psn, tvb(8, 4))
  bh:add(pf.tsval, tvb(12, 4))

  st.version = rshift(byte0, 4)
  st.pc = is_set(byte0, FLAG_PC)
  st.ar = is_set(byte0, FLAG_AR)
  st.path_tag = tvb(2, 2):uint()
  st.dst_conn = tvb(4, 4):uint()
  st.psn = tvb(8, 4):uint()
  st.tsval = tvb(12, 4):uint()
end

-- Base Header fields whose value 3.3 fixes for the opcode: sent so and
-- ignored on receipt, so another value only draws a warning.
local function check_base_header_values(st)
  local op = st.opcode
  if not_on_a_path[op] then
    reserved_zero(st, st.tag_item, st.path_tag, st.opname .. " path_tag")
    reserved_zero(st, st.psn_item, st.psn, st.opname .. " psn")
    if st.ar then
      st.ar_item:add_proto_expert_info(ex.reserved, "AR set in a " .. st.opname ..
        ": sent clear and ignored (3.3)")
    end
  elseif op == 0x12 then
    st.psn_item:append_text(" (not a PSN: a tail-loss probe's per-path send order number, " ..
      "0 for a re-probe or keepalive; 3.11)")
    if not st.ar then
      st.ar_item:add_proto_expert_info(ex.unexpected, "AR clear in a PROBE: set in every " ..
        "PROBE (3.3, 3.11)")
    end
  end
  if op == 0x20 then
    -- A responder does not read it (3.12).
    reserved_zero(st, st.dst_item, st.dst_conn, "CONNECT_REQ dst_conn")
  end
end

local function dissect_message_header(st, tree, off)
  local tvb = st.tvb
  local mh = tree:add(tvb(off, MH_LEN), "Message Header")
  local msn_item = mh:add(pf.msn, tvb(off, 4))
  mh:add(pf.offset, tvb(off + 4, 4))
  mh:add(pf.msg_len, tvb(off + 8, 4))
  st.msn = tvb(off, 4):uint()
  -- 3.5: what the MSN counts depends on the opcode; a WRITE's is 0, ignored.
  if st.opcode == 0x01 then
    reserved_zero(st, msn_item, st.msn, "WRITE msn")
  elseif st.opcode == 0x05 or st.opcode == 0x06 then
    msn_item:append_text(" (read sequence number)")
  else
    msn_item:append_text(" (RSN: the receive buffer it consumes)")
  end
  st.offset = tvb(off + 4, 4):uint()
  st.msg_len = tvb(off + 8, 4):uint()
end

local function dissect_rdma_header(st, tree, off)
  local tvb = st.tvb
  local rh = tree:add(tvb(off, RH_LEN), "RDMA Header")
  rh:add(pf.rkey, tvb(off, 8))
  local raddr_item = rh:add(pf.raddr, tvb(off + 8, 8))
  st.rkey = tvb(off, 8):uint64()
  if st.opcode == 0x05 then
    raddr_item:append_text(" (the read's base)")
  elseif st.offset ~= 0 then
    -- 3.6: a WRITE's raddr is its own first byte's, so packets of one
    -- message differ; the message's start is common to them.
    raddr_item:append_text(" (this packet's first byte; the message starts at 0x" ..
      (tvb(off + 8, 8):uint64() - UInt64(st.offset)):tohex() .. ")")
  end
end

-- Returns the full ACK length (fixed part plus SACK words as sack_words says).
local function dissect_ack(st, tree, off)
  local tvb = st.tvb
  local words = tvb(off + 15, 1):uint()
  local ack = tree:add(tvb(off, ACK_FIXED_LEN), "ACK")
  local cum = tvb(off, 4):uint()
  st.echo_psn, st.echo_tsval = tvb(off + 4, 4):uint(), tvb(off + 8, 4):uint()
  ack:add(pf.ack_cum_psn, tvb(off, 4))
  ack:add(pf.ack_echo_psn, tvb(off + 4, 4))
  ack:add(pf.ack_echo_tsval, tvb(off + 8, 4))
  local tag = ack:add(pf.ack_echo_path_tag, tvb(off + 12, 2))
  tag:add(pf.ack_echo_generation, tvb(off + 12, 2))
  tag:add(pf.ack_echo_slot, tvb(off + 12, 2))
  local aflags = tvb(off + 14, 1):uint()
  local fl = ack:add(pf.ack_flags, tvb(off + 14, 1))
  fl:add(pf.ack_echo_ce, tvb(off + 14, 1))
  fl:add(pf.ack_echo_dup, tvb(off + 14, 1))
  fl:add(pf.ack_echo_probe, tvb(off + 14, 1))
  fl:add(pf.ack_echo_trimmed, tvb(off + 14, 1))
  reserved_zero(st, fl:add(pf.ack_flags_reserved, tvb(off + 14, 1)), band(aflags, 0xF0),
    "Ack flag bits 7-4")
  -- 3.11: a PROBE's answer carries none of the data echoes; a sender ignores ECHO_CE there
  -- (no CC-4 cut), so a peer that sets it looks healthy unless the capture says so.
  if is_set(aflags, ECHO_PROBE) then
    for _, echo in ipairs({{ECHO_CE, "ECHO_CE"}, {ECHO_DUP, "ECHO_DUP"},
        {ECHO_TRIMMED, "ECHO_TRIMMED"}}) do
      if is_set(aflags, echo[1]) then
        fl:add_proto_expert_info(ex.unexpected, echo[2] .. " with ECHO_PROBE: a PROBE's " ..
          "answer never carries it (3.11)")
      end
    end
  end
  local words_item = ack:add(pf.ack_sack_words, tvb(off + 15, 1))
  reserved_zero(st, ack:add(pf.ack_reserved, tvb(off + 16, 4)), tvb(off + 16, 4):uint(), "Reserved")

  if words > MAX_SACK_WORDS then
    words_item:add_proto_expert_info(ex.bad_field,
      "sack_words " .. words .. " is above " .. MAX_SACK_WORDS)
  end
  -- Only the words that are really there; a short datagram is reported by the caller.
  local sacked = {}
  local shown = 0
  for j = 0, words - 1 do
    local w = off + ACK_FIXED_LEN + SACK_WORD_LEN * j
    if not captured(st, w, SACK_WORD_LEN) or w + SACK_WORD_LEN > st.datagram - ICRC_LEN then
      break
    end
    local word = tvb(w, SACK_WORD_LEN):uint64()
    local witem = ack:add(pf.ack_sack, tvb(w, SACK_WORD_LEN))
    witem:append_text(" [" .. j .. "]")
    local lo, hi = word:lower(), word:higher()
    for i = 0, 63 do
      if sack_bit(lo, hi, i) then
        local psn = (cum + 1 + 64 * j + i) % 4294967296
        sacked[#sacked + 1] = psn
        witem:add(pf.ack_sack_psn, psn):set_generated()
      end
    end
    shown = shown + 1
  end
  if shown > 0 then ack:set_len(ACK_FIXED_LEN + SACK_WORD_LEN * shown) end
  ack:add(pf.ack_sack_count, #sacked):set_generated()

  add_info(st, "cum=" .. hex(cum))
  if #sacked > 0 then add_info(st, "sack=" .. psn_ranges(sacked)) end
  add_info(st, "echo=" .. hex(tvb(off + 4, 4):uint()))
  -- The path the echoed packet took (its sender's slot), as data packets show theirs.
  add_info(st, "slot=" .. band(tvb(off + 12, 2):uint(), 0x1F))
  if is_set(aflags, ECHO_CE) then st.suffix[#st.suffix + 1] = "CE" end
  if is_set(aflags, ECHO_DUP) then st.suffix[#st.suffix + 1] = "DUP" end
  if is_set(aflags, ECHO_PROBE) then st.suffix[#st.suffix + 1] = "PROBE" end
  if is_set(aflags, ECHO_TRIMMED) then st.suffix[#st.suffix + 1] = "TRIMMED" end
  return ACK_FIXED_LEN + SACK_WORD_LEN * words
end

local function dissect_nak(st, tree, off)
  local tvb = st.tvb
  local nak = tree:add(tvb(off, 16), "NAK")
  local code = tvb(off + 4, 1):uint()
  nak:add(pf.nak_psn, tvb(off, 4))
  local code_item = nak:add(pf.nak_code, tvb(off + 4, 1))
  reserved_zero(st, nak:add(pf.nak_reserved, tvb(off + 5, 3)), tvb(off + 5, 3):uint(), "Reserved")
  nak:add(pf.nak_msn, tvb(off + 8, 4))
  nak:add(pf.nak_cum_psn, tvb(off + 12, 4))
  if nak_code_names[code] == nil then
    code_item:add_proto_expert_info(ex.bad_field,
      "NAK code " .. hex(code) .. " is outside 0x01-0x07")
  elseif code == 0x01 then
    code_item:append_text(" (not fatal: the sender retries, NAK-4)")
  else
    code_item:append_text(" (fatal: the connection is in ERROR, NAK-3)")
  end
  add_info(st, nak_code_names[code] or ("code=" .. hex(code)))
  add_info(st, "psn=" .. hex(tvb(off, 4):uint()))
  add_info(st, "cum=" .. hex(tvb(off + 12, 4):uint()))
end

-- TRIM-5 needs a connection's mtu, which only its handshake shows: the
-- smaller of the CONNECT_REQ's and the CONNECT_ACCEPT's offers (CONN-1).
-- Learnt from the handshakes the capture holds, by the receiving address and
-- connection id (a data packet's IP destination and dst_conn).
local offered_mtu, conn_mtu = {}, {}
-- A requester's nonce (as text) and the frame of its CONNECT_REQ, by its
-- address and connection id: an answer must carry that nonce (CONN-2).
local offered_nonce, offered_frame = {}, {}
-- Without the handshake: the largest payload seen in a data packet that was
-- not its message's last. Such a packet carries the whole mtu (SEQ-5), or
-- less if it was cut itself, so the mtu is at least this.
local mtu_at_least = {}
local function conn_key(addr, conn) return tostring(addr) .. "/" .. conn end

local function dissect_connect(st, tree, off)
  local tvb = st.tvb
  local mtu = tvb(off + 8, 2):uint()
  if st.opcode == 0x20 then
    offered_mtu[conn_key(st.pinfo.src, tvb(off, 4):uint())] = mtu
  elseif st.opcode == 0x21 then
    local requester = conn_key(st.pinfo.dst, st.dst_conn)
    local agreed = math.min(mtu, offered_mtu[requester] or mtu)
    conn_mtu[requester] = agreed
    conn_mtu[conn_key(st.pinfo.src, tvb(off, 4):uint())] = agreed
  end
  local body = tree:add(tvb(off, 24), "Connection")
  local src = tvb(off, 4):uint()
  st.src_conn = src
  local src_item = body:add(pf.conn_src_conn, tvb(off, 4))
  body:add(pf.conn, tvb(off, 4)):set_hidden()
  body:add(pf.conn_initial_psn, tvb(off + 4, 4))
  local mtu_item = body:add(pf.conn_mtu, tvb(off + 8, 2))
  local window_item = body:add(pf.conn_window_log2, tvb(off + 10, 1))
  local reads_item = body:add(pf.conn_max_reads, tvb(off + 11, 1))
  local code = tvb(off + 12, 1):uint()
  local code_item = body:add(pf.conn_code, tvb(off + 12, 1))
  body:add(pf.conn_max_version, tvb(off + 13, 1))
  if st.opcode == 0x22 then
    -- 3.12: a REJECT's other fields are not interpreted.
    if failed_by[code] then
      -- Sent as the spec says, not a refusal of the peer's own making.
      code_item:append_text(" (the peer's connection had failed, CONN-3: it answers a " ..
        "repeated request so; the requester's connect fails kConnectRefused)")
    elseif code ~= 0x47 and code ~= 0x48 and code ~= 0x4a then
      code_item:add_proto_expert_info(ex.unexpected, "REJECT code " .. hex(code) ..
        " is none of 0x47, 0x48, 0x4a nor a status that fails a connection (CONN-3): " ..
        "the requester takes it as kConnectRefused (CONN-4)")
    end
  else
    reserved_zero(st, code_item, code, st.opname .. " code")
    if src == 0 then
      -- VER-1, CONN-3: no connection is named 0; the engine drops such a packet.
      src_item:add_proto_expert_info(ex.unexpected, "src_conn 0: names no connection, " ..
        (st.opcode == 0x20 and "dropped unanswered (VER-1)" or "ignored (CONN-3)"))
    end
    if mtu < 256 then
      mtu_item:add_proto_expert_info(ex.unexpected, "mtu " .. mtu .. " is below the least, " ..
        "256: " .. (st.opcode == 0x20 and "refused with kConnectRefused" or
          "the connect fails kConnectRefused") .. " (CONN-1, CONN-3)")
    end
    local window = tvb(off + 10, 1):uint()
    if window < 6 then window_item:append_text(" (taken as 6, SEQ-3)") end
    if tvb(off + 11, 1):uint() == 0 then reads_item:append_text(" (taken as 1)") end
  end
  local reply_port = tvb(off + 14, 2):uint()
  local reply_item = body:add(pf.conn_reply_port, tvb(off + 14, 2))
  if st.opcode ~= 0x20 then
    -- ACCEPT and REJECT name none (CONN-3); a receiver ignores the field.
    reserved_zero(st, reply_item, reply_port, "Reply port of an ACCEPT or REJECT")
  elseif reply_port == 0 then
    reply_item:append_text(" (answers go to the request's source port)")
  end
  local nonce_item = body:add(pf.conn_nonce, tvb(off + 16, 8))
  local nonce = tvb(off + 16, 8):uint64()
  if st.opcode == 0x20 and nonce == UInt64(0) then
    nonce_item:add_proto_expert_info(ex.unexpected, "Nonce 0: dropped unanswered (VER-1)")
  elseif st.opcode == 0x20 and not st.pinfo.visited then
    local requester = conn_key(st.pinfo.src, src)
    offered_nonce[requester] = nonce:tohex()
    offered_frame[requester] = st.pinfo.number
  elseif st.opcode ~= 0x20 then
    local requester = conn_key(st.pinfo.dst, st.dst_conn)
    local want = offered_nonce[requester]
    if want ~= nil and want ~= nonce:tohex() and offered_frame[requester] < st.pinfo.number then
      nonce_item:add_proto_expert_info(ex.unexpected, "Nonce is not the 0x" .. want ..
        " of the requester's CONNECT_REQ (frame " .. offered_frame[requester] ..
        "): the requester ignores this answer (CONN-2)")
    end
  end
  add_info(st, "src=" .. hex(tvb(off, 4):uint()))
  if st.opcode == 0x22 then
    local code = tvb(off + 12, 1):uint()
    add_info(st, "code=" .. (status_names[code] or hex(code)))
  else
    add_info(st, "ipsn=" .. hex(tvb(off + 4, 4):uint()))
    add_info(st, "mtu=" .. tvb(off + 8, 2):uint())
  end
end

local function dissect_disconnect(st, tree, off)
  local tvb = st.tvb
  local body = tree:add(tvb(off, 8), "Disconnect")
  st.src_conn = tvb(off, 4):uint()
  body:add(pf.disc_src_conn, tvb(off, 4))
  body:add(pf.conn, tvb(off, 4)):set_hidden()
  local reason = tvb(off + 4, 1):uint()
  local reason_item = body:add(pf.disc_reason, tvb(off + 4, 1))
  reserved_zero(st, body:add(pf.disc_reserved, tvb(off + 5, 3)), tvb(off + 5, 3):uint(), "Reserved")
  add_info(st, "src=" .. hex(tvb(off, 4):uint()))
  if st.opcode == 0x24 then
    -- CONN-8: a DISCONNECT_ACK gives no reason; its byte is sent as 0, not read.
    reserved_zero(st, reason_item, reason, "Reason of a DISCONNECT_ACK")
  elseif reason ~= 0 then
    add_info(st, "reason=" .. (status_names[reason] or hex(reason)))
    if status_names[reason] == nil then
      -- CONN-8: informs only; a later revision may give it a meaning.
      reason_item:append_text(" (not in appendix A: the DISCONNECT closes all the same, CONN-8)")
    end
  end
end

local body_dissectors = { ack = dissect_ack, nak = dissect_nak, connect = dissect_connect,
  disconnect = dissect_disconnect }

---------------------------------------------------------------- payload, ICRC

-- Data packets: payload between the headers and the ICRC (BAD-5 checks,
-- TRIM-2 detection). Control packets and READ_REQ carry none.
local function dissect_payload(st, tree, hdr_len, layout)
  local payload_len = st.datagram - hdr_len - ICRC_LEN
  st.payload_len = payload_len
  if not layout.mh then
    if payload_len > 0 then
      local item = tree:add(pf.payload_len, payload_len)
      item:set_generated()
      item:add_proto_expert_info(ex.bad_length, payload_len .. " bytes after the " ..
        st.opname .. " headers, which carry none")
    end
    return
  end
  local len_item = tree:add(pf.payload_len, payload_len)
  len_item:set_generated()
  if not layout.payload and payload_len > 0 then
    len_item:add_proto_expert_info(ex.bad_length,
      "READ_REQ carries " .. payload_len .. " payload bytes")
  end
  if st.opcode == 0x05 and st.offset ~= 0 then
    len_item:add_proto_expert_info(ex.bad_field,
      "READ_REQ offset is " .. st.offset .. ", must be 0")
  end
  if st.opcode == 0x05 and st.msg_len > 2147483648 then
    len_item:add_proto_expert_info(ex.unexpected, "READ_REQ msg_len " .. st.msg_len ..
      " is above 2^31, the largest message: answered by NAK REMOTE_INVALID_REQUEST (READ-2)")
  end
  -- A datagram the snap length cut cannot be split if it is a GSO run (see
  -- gso_segment_len): one longer than its packet could be is taken for one.
  local key = conn_key(st.pinfo.dst, st.dst_conn)
  local cut = st.captured < st.datagram
  local run = cut and layout.payload and st.offset <= st.msg_len and
      (payload_len > st.msg_len - st.offset or
        (conn_mtu[key] ~= nil and payload_len > conn_mtu[key]))
  if st.offset > st.msg_len then
    len_item:add_proto_expert_info(ex.bad_length,
      "offset " .. st.offset .. " is beyond msg_len " .. st.msg_len)
  elseif run then
    local mtu = conn_mtu[key]
    len_item:add_proto_expert_info(ex.gso, "Payload " .. payload_len .. " is longer than " ..
      (mtu and payload_len <= st.msg_len - st.offset and ("the connection's mtu, " .. mtu)
        or ("msg_len - offset = " .. (st.msg_len - st.offset))) ..
      ": several packets in one datagram (a GSO run or GRO batch), which the snap length " ..
      "cut, so not split; if one packet, a bad length (BAD-5, TRIM-5)")
    st.suffix[#st.suffix + 1] = "GSO?"
  elseif layout.payload and payload_len > st.msg_len - st.offset then
    len_item:add_proto_expert_info(ex.bad_length, "payload " .. payload_len ..
      " is longer than msg_len - offset = " .. (st.msg_len - st.offset))
  elseif layout.payload and payload_len > 0 and not st.quoted then
    -- TRIM-5 (SEQ-5): a data packet carries exactly min(mtu, msg_len -
    -- offset) bytes. One cut part way (a switch that trims to a length, a
    -- trimmed packet whose TRIMMED DSCP a later hop rewrote and whose rest
    -- came along) does not, and a receiver drops it as a bad length. Only a
    -- connection whose handshake the capture holds has a known mtu.
    local mtu = conn_mtu[key]
    local want = mtu and math.min(mtu, st.msg_len - st.offset)
    local where = "payload " .. payload_len .. " at offset " .. st.offset .. " of a " ..
        st.msg_len .. "-byte message on a connection of mtu "
    if want and payload_len ~= want then
      len_item:add_proto_expert_info(ex.partial, where .. mtu .. ": must be " .. want ..
        "; dropped as a bad length (TRIM-5)")
    elseif not mtu then
      -- No handshake captured: only a payload shorter than one the
      -- connection's packets are known to carry is sure to be cut.
      local least = mtu_at_least[key]
      local least_want = least and math.min(least, st.msg_len - st.offset)
      if least_want and payload_len < least_want then
        len_item:add_proto_expert_info(ex.partial, where .. "at least " .. least ..
          " (an earlier packet's payload; its handshake is not in the capture): must be " ..
          "at least " .. least_want .. "; dropped as a bad length (TRIM-5)")
      end
      -- Only from a datagram captured whole: one cut may be a GSO run
      -- that looks like a single packet of a larger mtu.
      if not cut and st.offset + payload_len < st.msg_len and payload_len > (least or 0) then
        mtu_at_least[key] = payload_len
      end
    end
  end

  -- TRIM-2: only a data packet with headers and ICRC only that the TRIMMED
  -- DSCP flags is trimmed. One cut to its headers without the flag is not
  -- (a later hop may have rewritten it): TRIM-5 drops it as a bad length,
  -- and its ICRC is checked like any other.
  if payload_len == 0 then
    local missing = layout.payload and st.msg_len > st.offset
    if trimmed_dscp_seen() then
      st.trimmed = true
      st.payload_cut = missing -- READ_REQ and empty messages lose nothing
      local item = tree:add(pf.trimmed, true)
      item:set_generated()
      item:add_proto_expert_info(ex.trimmed, "TRIMMED DSCP, no payload")
    elseif missing then
      len_item:add_proto_expert_info(ex.bad_length, "no payload though msg_len - offset = " ..
        (st.msg_len - st.offset) .. ", and no TRIMMED DSCP: not trimmed (TRIM-5)")
    end
  end

  local in_capture = math.min(payload_len, st.captured - hdr_len)
  if in_capture > 0 then
    data_dissector:call(st.tvb(hdr_len, in_capture):tvb(), st.pinfo, tree)
  end
end

local function dissect_icrc(st, tree, hdr_len, layout)
  local tvb = st.tvb
  local icrc_off = st.datagram - ICRC_LEN
  -- INT-1/INT-2: PC set covers everything before the ICRC, PC clear the
  -- headers. An opcode without payload has it over everything before it
  -- either way (BAD-4), stray bytes after its headers included.
  local covered = (st.pc or not layout.payload) and icrc_off or hdr_len
  local function unverified(item, why)
    tree:add(pf.icrc_status, ICRC_UNVERIFIED):set_generated()
    item:add_proto_expert_info(ex.icrc_unverified, "ICRC not verified: " .. why)
  end

  if not captured(st, icrc_off, ICRC_LEN) then
    local item = tree:add(pf.icrc_status, ICRC_UNVERIFIED)
    item:set_generated()
    local lost = (st.payload_len and st.payload_len > 0) and "payload and ICRC" or "ICRC"
    item:add_proto_expert_info(ex.not_captured, "Capture holds " .. st.captured .. " of " ..
      st.datagram .. " bytes: " .. lost .. " not captured")
    return
  end
  local stored = tvb(icrc_off, ICRC_LEN):uint()
  local item = tree:add(pf.icrc, tvb(icrc_off, ICRC_LEN))
  if st.trimmed and st.pc and st.payload_cut then
    -- TRIM-2: the ICRC covered the payload that is gone. (A flagged READ_REQ
    -- or empty message lost nothing: its ICRC, over the headers, is checked.)
    unverified(item, "PC set and the payload was trimmed")
    return
  end
  if not metaroce.prefs.verify_icrc then
    unverified(item, "disabled in the preferences")
    return
  end
  local computed = crc32c(tvb:raw(0, covered))
  tree:add(pf.icrc_covered, covered):set_generated()
  tree:add(pf.icrc_computed, computed):set_generated()
  if computed == stored then
    item:append_text(" [correct]")
    tree:add(pf.icrc_status, ICRC_GOOD):set_generated()
  else
    item:append_text(" [incorrect, should be " .. string.format("0x%08x", computed) .. "]")
    tree:add(pf.icrc_status, ICRC_BAD):set_generated()
    item:add_proto_expert_info(ex.icrc_bad, string.format(
      "ICRC 0x%08x does not match 0x%08x computed over bytes 0..%d", stored, computed, covered - 1))
    st.suffix[#st.suffix + 1] = "ICRC BAD"
    st.icrc_bad = true
  end
end

---------------------------------------------------------------- ECN

local ecn_names = { [0] = "Not-ECT", [1] = "ECT(1)", [2] = "ECT(0)", [3] = "CE" }

-- ENC-4: every packet leaves ECT(0); CE is a switch's mark on the way.
local function check_ecn(st, tree)
  local last
  for _, f in ipairs({ ip_ecn() }) do last = f end
  for _, f in ipairs({ ipv6_ecn() }) do last = f end
  if last == nil then return end
  local ecn = last.value
  if ecn == 3 then
    st.suffix[#st.suffix + 1] = "ECN-CE"
  elseif ecn ~= 2 then
    tree:add_proto_expert_info(ex.not_ect, "IP ECN is " .. ecn_names[ecn] ..
      ", must be ECT(0) (ENC-4): " .. (ecn == 0 and
        "switches cannot mark it CE, so its path's congestion goes unseen" or
        "ECT(1) asks switches for L4S marking, which the congestion control does not expect"))
  end
end

---------------------------------------------------------------- connections

-- Per capture (metaroce.init clears them). A connection end is its
-- receiving address and connection id (ENC-3: never the port), the key
-- conn_key makes; a stream is the two ends of one connection.
local streams, stream_keys, stream_count = {}, {}, 0
-- (sender, receiver, psn, tsval) of data packets and PROBEs on a stream
-- that has one end known, to the stream: an ACK echoing one names the other.
local echoes, echo_count = {}, 0
local MAX_ECHOES = 65536
-- ACKs and NAKs to a connection end not yet on a stream, whose echo named no
-- packet seen (the capture began after it): after this many, the end gets a
-- stream of its own (a capture of one direction); before, none.
local unpaired = {}
local PAIRING_TRIES = 16
-- Per connection end, each PSN's latest frame.
local sent_psns = {}
-- Per packet (frame number * 65536 + its offset in the datagram), the
-- results of the first pass, for a later one (GUI clicks, tshark -2); false
-- for none.
local first_stream, first_prev = {}, {}

function metaroce.init()
  offered_mtu, conn_mtu, mtu_at_least = {}, {}, {}
  offered_nonce, offered_frame = {}, {}
  streams, stream_keys, stream_count = {}, {}, 0
  echoes, echo_count, unpaired = {}, 0, {}
  sent_psns, first_stream, first_prev = {}, {}, {}
end

local function bind(key, stream)
  if streams[key] == nil then
    streams[key] = stream
    stream_keys[stream] = (stream_keys[stream] or 0) + 1
  end
  return streams[key]
end

local function new_stream()
  stream_count = stream_count + 1
  return stream_count - 1 -- from 0, as tcp.stream
end

local function echo_key(from, to, psn, tsval)
  return tostring(from) .. ">" .. tostring(to) .. "/" .. psn .. "/" .. tsval
end

-- The stream of a packet, and for a data packet the frame that last
-- carried its PSN to the same connection (nil for its first sending).
local function follow(st, layout)
  local pinfo, op = st.pinfo, st.opcode
  local here = conn_key(pinfo.dst, st.dst_conn)
  local stream, prev
  if op == 0x20 then
    local k = conn_key(pinfo.src, st.src_conn)
    stream = bind(k, streams[k] or new_stream())
  elseif op == 0x21 or op == 0x23 or op == 0x24 then
    -- Both ids: the ACCEPT's and the DISCONNECTs' src_conn is the sender's.
    local there = conn_key(pinfo.src, st.src_conn)
    stream = streams[here] or streams[there] or new_stream()
    bind(here, stream)
    bind(there, stream)
  else
    stream = streams[here]
    if stream == nil and op == 0x10 then
      -- 3.9: the ACK echoes a packet that went the other way, on its stream.
      stream = echoes[echo_key(pinfo.dst, pinfo.src, st.echo_psn, st.echo_tsval)]
    end
    if stream == nil and (op == 0x10 or op == 0x11) then
      unpaired[here] = (unpaired[here] or 0) + 1
      if unpaired[here] < PAIRING_TRIES then return nil, nil end
    end
    stream = bind(here, stream or new_stream())
    if (layout.mh or op == 0x12) and stream_keys[stream] < 2 then
      if echo_count >= MAX_ECHOES then echoes, echo_count = {}, 0 end
      echoes[echo_key(pinfo.src, pinfo.dst, st.psn, st.tsval)] = stream
      echo_count = echo_count + 1
    end
  end
  if layout.mh then
    local psns = sent_psns[here]
    if psns == nil then
      psns = {}
      sent_psns[here] = psns
    end
    prev = psns[st.psn]
    psns[st.psn] = pinfo.number
  end
  return stream, prev
end

-- The packet's stream and retransmission, from the first pass on later ones.
local function dissect_connection(st, tree, layout)
  if st.icrc_bad or st.quoted then return end -- nothing in it can be trusted (BAD-4)
  -- A datagram is at most 65535 bytes long.
  local id = st.pinfo.number * 65536 + st.index
  local stream, prev = first_stream[id], first_prev[id]
  if not st.pinfo.visited or stream == nil then
    stream, prev = follow(st, layout)
    stream, prev = stream or false, prev or false
    first_stream[id], first_prev[id] = stream, prev
  end
  if stream then tree:add(pf.stream, stream):set_generated() end
  if prev then
    local item = tree:add(pf.retrans_prev, prev)
    item:set_generated()
    item:add_proto_expert_info(ex.retransmission, "PSN " .. hex(st.psn) ..
      " sent to this connection before, last in frame " .. prev)
    st.suffix[#st.suffix + 1] = "RETRANSMISSION"
  end
end

---------------------------------------------------------------- dissector

-- The packet's summary, for its tree item and the Info column.
local function summary(st)
  local text = table.concat(st.info, " ")
  if #st.suffix > 0 then text = text .. " [" .. table.concat(st.suffix, ",") .. "]" end
  st.root:append_text(", " .. text)
  return text
end

local function dissect(st)
  local tvb, tree = st.tvb, st.root
  tree:add(pf.entropy, st.pinfo.src_port):set_generated()

  if st.captured < BH_LEN then
    add_info(st, st.datagram < MIN_DATAGRAM and "Truncated" or "Not captured")
    local e = st.datagram < MIN_DATAGRAM and ex.truncated or ex.not_captured
    tree:add_proto_expert_info(e, "Datagram of " .. st.datagram .. " bytes (" .. st.captured ..
      " captured); the Base Header alone is " .. BH_LEN)
    return
  end
  dissect_base_header(st, tree)
  st.opcode = tvb(1, 1):uint()
  st.opname = opcode_names[st.opcode] or ("opcode " .. hex(st.opcode))
  add_info(st, st.opname)

  -- 11.3's order: a length below 20 first (BAD-1), then version and opcode;
  -- 16 to 19 bytes are truncated whatever the Base Header says.
  if st.datagram < MIN_DATAGRAM then
    tree:add_proto_expert_info(ex.truncated, "Datagram of " .. st.datagram ..
      " bytes is shorter than " .. MIN_DATAGRAM)
    st.suffix[#st.suffix + 1] = "TRUNCATED"
    return
  end
  if st.version ~= VERSION then
    local text = "Version " .. st.version .. ", this dissector knows " .. VERSION
    if st.opcode == 0x20 then
      -- CONN-5: a CONNECT_REQ of any version long enough to echo is answered
      -- from the fields every version keeps in place (VER-1).
      if st.datagram < BH_LEN + layouts[0x20].body_len + ICRC_LEN then
        text = text .. "; a CONNECT_REQ too short to answer (CONN-5): dropped"
      elseif captured(st, BH_LEN, 24) and (tvb(BH_LEN, 4):uint() == 0 or
            tvb(BH_LEN + 16, 8):uint64() == UInt64(0)) then
        text = text .. "; a CONNECT_REQ naming connection id 0 or nonce 0 (VER-1): dropped " ..
            "unanswered"
      else
        text = text .. "; a CONNECT_REQ: answered with a version-1 CONNECT_REJECT " ..
            "kVersionMismatch (CONN-5)"
        if captured(st, BH_LEN, 24) then
          local inv = tree:add(tvb(BH_LEN, 24), "Version-invariant fields (VER-1)")
          inv:add(pf.conn_src_conn, tvb(BH_LEN, 4))
          inv:add(pf.conn, tvb(BH_LEN, 4)):set_hidden()
          inv:add(pf.conn_reply_port, tvb(BH_LEN + 14, 2))
          inv:add(pf.conn_nonce, tvb(BH_LEN + 16, 8))
          add_info(st, "src=" .. hex(tvb(BH_LEN, 4):uint()))
        end
      end
    end
    tree:add_proto_expert_info(ex.bad_version, text)
    st.suffix[#st.suffix + 1] = "BAD VERSION"
    return
  end
  local layout = layouts[st.opcode]
  if layout == nil then
    tree:add_proto_expert_info(ex.bad_opcode, "Unknown opcode " .. hex(st.opcode))
    st.suffix[#st.suffix + 1] = "BAD OPCODE"
    return
  end

  check_base_header_values(st)

  -- Fixed part of the headers; ACK adds its SACK words once byte 31 is read.
  local hdr_len = header_len(layout)
  local function truncated(need)
    tree:add_proto_expert_info(ex.truncated, "Datagram of " .. st.datagram .. " bytes; " ..
      st.opname .. " needs " .. need .. " (headers and ICRC)")
    st.suffix[#st.suffix + 1] = "TRUNCATED"
  end
  if st.datagram < hdr_len + ICRC_LEN then return truncated(hdr_len + ICRC_LEN) end
  if not captured(st, 0, hdr_len) then
    tree:add_proto_expert_info(ex.not_captured, "Capture holds " .. st.captured .. " of the " ..
      hdr_len .. " header bytes")
    return
  end

  local off = BH_LEN
  if layout.mh then
    dissect_message_header(st, tree, off)
    off = off + MH_LEN
  end
  if layout.rh then
    dissect_rdma_header(st, tree, off)
    off = off + RH_LEN
  end
  if layout.imm then
    tree:add(pf.imm, tvb(off, IMM_LEN))
    off = off + IMM_LEN
  end
  if layout.mh then
    add_info(st, "psn=" .. hex(st.psn))
    add_info(st, "slot=" .. band(st.path_tag, 0x1F))
    add_info(st, "conn=" .. hex(st.dst_conn))
    if st.opcode ~= 0x01 then add_info(st, "msn=" .. st.msn) end
    add_info(st, "off=" .. st.offset)
  elseif st.opcode == 0x12 then
    add_info(st, "conn=" .. hex(st.dst_conn))
    add_info(st, "slot=" .. band(st.path_tag, 0x1F))
    add_info(st, "gen=" .. rshift(st.path_tag, 5))
  else
    add_info(st, "conn=" .. hex(st.dst_conn))
  end
  if layout.body then
    local body_len = body_dissectors[layout.body](st, tree, off)
    if body_len and body_len > layout.body_len then
      -- ACK: sack_words decides the length; check it against the datagram.
      hdr_len = hdr_len - layout.body_len + body_len
      if st.datagram < hdr_len + ICRC_LEN then
        -- BAD-4: the ICRC, over every byte before it, is checked before
        -- sack_words is trusted: a bit flip there is a bad checksum.
        dissect_icrc(st, tree, st.datagram - ICRC_LEN, layout)
        return truncated(hdr_len + ICRC_LEN)
      end
    end
  end
  dissect_payload(st, tree, hdr_len, layout)
  if st.payload_len and layout.mh and layout.payload then add_info(st, "len=" .. st.payload_len) end
  dissect_icrc(st, tree, hdr_len, layout)
  dissect_connection(st, tree, layout)
  check_ecn(st, tree)
  if st.ar then st.suffix[#st.suffix + 1] = "AR" end
  if st.trimmed then st.suffix[#st.suffix + 1] = "TRIMMED" end
end

-- Big-endian 32 bits at string position i (1-based).
local function u32_at(bytes, i)
  local a, b, c, d = bytes:byte(i, i + 3)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

-- ENC-1 holds on the wire, but a capture taken before UDP GSO segments a
-- run (the sender's own, loopback included: udp/README.md, "GSO runs") or
-- after GRO joins one shows several packets back to back in one datagram,
-- each of the run's segment size but the last, which may be shorter. The
-- segment size when the datagram is such a run, nil when it is one packet
-- (or neither: then it is shown, and judged, as one). Only a datagram
-- captured whole, whose first packet's ICRC matches where it ends.
local function gso_segment_len(tvb)
  local datagram = tvb:reported_len()
  if tvb:len() < datagram or datagram < 2 * MIN_DATAGRAM then return nil end
  -- Cheap tests first: the heuristic asks this of every UDP datagram it sees.
  if rshift(tvb(0, 1):uint(), 4) ~= VERSION or layouts[tvb(1, 1):uint()] == nil then return nil end
  local raw = tvb:raw(0, datagram)
  local function starts_packet(off) -- version 1, a known opcode, room for a PROBE
    if datagram - off < MIN_DATAGRAM or rshift(raw:byte(off + 1), 4) ~= VERSION then
      return false
    end
    return layouts[raw:byte(off + 2)] ~= nil
  end
  if not starts_packet(0) then return nil end
  local layout = layouts[raw:byte(2)]
  local hdr = header_len(layout)
  if datagram < hdr + ICRC_LEN then return nil end
  local seg
  if not layout.payload then
    if layout.body == "ack" then
      local words = raw:byte(BH_LEN + 16)
      if words > MAX_SACK_WORDS then return nil end
      hdr = hdr + SACK_WORD_LEN * words
    end
    if datagram < hdr + ICRC_LEN + MIN_DATAGRAM then return nil end
    if crc32c(raw:sub(1, hdr)) ~= u32_at(raw, hdr + 1) then return nil end
    seg = hdr + ICRC_LEN
  else
    -- The payload length is the unknown: the first ICRC position whose
    -- ICRC matches (INT-1: over the payload too with PC set, the headers
    -- only with PC clear) and after which a packet starts. The datagram as
    -- one packet is tried first, so that one never splits.
    local offset, msg_len = u32_at(raw, BH_LEN + 5), u32_at(raw, BH_LEN + 9)
    if offset > msg_len then return nil end
    local pc = is_set(raw:byte(1), FLAG_PC)
    local running = crc32c_update(0xFFFFFFFF, raw, 1, hdr)
    local header_crc = crc32c_final(running)
    local last = datagram - ICRC_LEN
    if pc then
      if crc32c(raw:sub(1, last)) == u32_at(raw, last + 1) then return nil end
    elseif header_crc == u32_at(raw, last + 1) and last - hdr <= msg_len - offset then
      return nil
    end
    local most = math.min(hdr + (msg_len - offset), datagram - ICRC_LEN - MIN_DATAGRAM)
    for icrc_off = hdr, most do
      local crc = pc and crc32c_final(running) or header_crc
      if crc == u32_at(raw, icrc_off + 1) and starts_packet(icrc_off + ICRC_LEN) then
        seg = icrc_off + ICRC_LEN
        break
      end
      if pc then running = crc32c_update(running, raw, icrc_off + 1, icrc_off + 1) end
    end
    if seg == nil then return nil end
  end
  for off = seg, datagram - 1, seg do
    if not starts_packet(off) then return nil end
  end
  return seg
end

-- One packet: its tree, and its summary for the Info column.
local function dissect_packet(tvb, pinfo, tree, index, datagram)
  local root = tvb:len() > 0 and tree:add(metaroce, tvb()) or tree:add(metaroce)
  local st = new_state(tvb, pinfo, root, datagram)
  st.index = index
  if st.quoted then
    root:add(tvb(0, 0), "[Quoted in an ICMP error: not a packet sent, no stream, " ..
      datagram_length(tvb, pinfo) .. " bytes long]")
  end
  local ok, err = pcall(dissect, st)
  if not ok then
    root:add_proto_expert_info(ex.dissector_bug, "Dissector failure: " .. tostring(err))
  end
  return summary(st), root
end

-- A datagram: one packet, or a GSO run of them, each decoded on its own.
local function dissect_datagram(tvb, pinfo, tree)
  local datagram = tvb:reported_len()
  if datagram == 0 then return 0 end
  pinfo.cols.protocol = "MetaRoCE"
  if pinfo.in_error_pkt then
    dissect_packet(tvb, pinfo, tree, 0, datagram_length(tvb, pinfo))
    return tvb:len()
  end
  local ok, seg = pcall(gso_segment_len, tvb)
  if not ok or seg == nil then
    pinfo.cols.info = (dissect_packet(tvb, pinfo, tree, 0))
    return tvb:len()
  end
  local texts, first = {}, nil
  for off = 0, datagram - 1, seg do
    local text, root = dissect_packet(tvb(off, math.min(seg, datagram - off)):tvb(), pinfo, tree,
      off)
    texts[#texts + 1] = text
    first = first or root
  end
  first:add(pf.gso_segments, #texts):set_generated()
  first:add(pf.gso_segment_len, seg):set_generated()
  first:add_proto_expert_info(ex.gso, #texts .. " packets of up to " .. seg ..
    " bytes in one datagram of " .. datagram ..
    ": captured before GSO segmented it or after GRO joined it")
  pinfo.cols.info = table.concat(texts, " | ")
  return datagram
end
metaroce.dissector = dissect_datagram

---------------------------------------------------------------- heuristic

-- Whether a UDP datagram on another port is MetaRoCE: version 1 (reserved
-- flag bits are ignored on receipt, spec 1.3, and only warned about by the
-- dissector), a known opcode, a length that fits its headers
-- (sack_words at most 16, no payload where none is carried, payload within
-- msg_len - offset), and a matching ICRC wherever it can be computed (all of
-- the datagram captured, and no payload the ICRC covered cut by a switch,
-- which the TRIMMED DSCP must then flag). Replies come from a server's
-- entropy ports (ENC-3) to a client's own port, neither of them 4792.
local function looks_like_metaroce(tvb, pinfo)
  local captured_len, datagram = tvb:len(), datagram_length(tvb, pinfo)
  if datagram < MIN_DATAGRAM or captured_len < BH_LEN then return false end
  local byte0 = tvb(0, 1):uint()
  if rshift(byte0, 4) ~= VERSION then return false end
  local layout = layouts[tvb(1, 1):uint()]
  if layout == nil then return false end
  local hdr_len = header_len(layout)
  if datagram < hdr_len + ICRC_LEN or captured_len < hdr_len then return false end
  if layout.body == "ack" then
    local words = tvb(BH_LEN + 15, 1):uint()
    if words > MAX_SACK_WORDS then return false end
    hdr_len = hdr_len + words * SACK_WORD_LEN
    if datagram < hdr_len + ICRC_LEN then return false end
  end
  local payload_len = datagram - hdr_len - ICRC_LEN
  local cut = false
  if layout.payload then
    local offset, msg_len = tvb(BH_LEN + 4, 4):uint(), tvb(BH_LEN + 8, 4):uint()
    if offset > msg_len or payload_len > msg_len - offset then return false end
    cut = payload_len == 0 and msg_len > offset
  elseif payload_len ~= 0 then
    return false
  end
  local pc = is_set(byte0, FLAG_PC)
  if cut and pc then return trimmed_dscp_seen() end -- TRIM-2: the ICRC covered what is gone
  if captured_len < datagram then return true end -- the snap length took the ICRC
  local covered = (pc and layout.payload) and datagram - ICRC_LEN or hdr_len
  return crc32c(tvb:raw(0, covered)) == tvb(datagram - ICRC_LEN, ICRC_LEN):uint()
end

local function heuristic(tvb, pinfo, tree)
  if not looks_like_metaroce(tvb, pinfo) then
    -- A GSO run (see gso_segment_len): every packet in it must pass.
    local seg = gso_segment_len(tvb)
    if seg == nil then return false end
    local datagram = tvb:reported_len()
    for off = 0, datagram - 1, seg do
      if not looks_like_metaroce(tvb(off, math.min(seg, datagram - off)):tvb(), pinfo) then
        return false
      end
    end
  end
  -- The function itself: metaroce.dissector reads back as the registered
  -- handle, whose call adds a second "metaroce" to frame.protocols.
  dissect_datagram(tvb, pinfo, tree)
  return true
end

---------------------------------------------------------------- registration

-- The port (ENC-2) for everything sent to it, and the heuristic ("metaroce_udp"
-- in Analyze > Enabled Protocols) for the rest: a server's replies from its
-- entropy ports, traffic to another configured port.
local udp_port_table = DissectorTable.get("udp.port")
local registered_port = DEFAULT_UDP_PORT
udp_port_table:add(registered_port, metaroce)
metaroce:register_heuristic("udp", heuristic)

function metaroce.prefs_changed()
  if metaroce.prefs.udp_port ~= registered_port then
    udp_port_table:remove(registered_port, metaroce)
    registered_port = metaroce.prefs.udp_port
    udp_port_table:add(registered_port, metaroce)
  end
end
