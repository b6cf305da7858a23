import NIOCore

/// Writes frames into a `ByteBuffer`. Callers write the header with the section lengths and then
/// the sections themselves, so nothing is assembled in temporary buffers.
extension ByteBuffer {
    /// Writes a 24-byte response header (magic 0x81). The caller then writes exactly
    /// `extrasLength` + `keyLength` + `valueLength` bytes.
    @inlinable
    public mutating func writeResponseHeader(
        opcode: Opcode, status: Status, opaque: UInt32, cas: UInt64 = 0, datatype: UInt8 = 0,
        extrasLength: Int = 0, keyLength: Int = 0, valueLength: Int = 0
    ) {
        precondition(
            extrasLength <= 255 && keyLength <= 65535, "response sections too long: \(extrasLength)/\(keyLength)")
        // One 24-byte store, not nine `writeInteger`s: each of those is a capacity check, a uniqueness check and an
        // exclusivity-checked store into the storage (swift_beginAccess); under pipelined GETs those checks alone
        // were 2.5 % of the node's samples (issue 19, ADR 0065).
        let word0 =
            UInt64(Magic.clientResponse.rawValue) << 56 | UInt64(opcode.rawValue) << 48 | UInt64(keyLength) << 32
            | UInt64(extrasLength) << 24 | UInt64(datatype) << 16 | UInt64(status.rawValue)
        let word1 = UInt64(UInt32(extrasLength + keyLength + valueLength)) << 32 | UInt64(opaque)
        writeHeaderWords(word0, word1, cas)
    }

    /// Writes three 64-bit words big-endian in one store: a frame header (magic ... status, body length and
    /// opaque, CAS).
    @inlinable
    mutating func writeHeaderWords(_ word0: UInt64, _ word1: UInt64, _ word2: UInt64) {
        var words = (word0.bigEndian, word1.bigEndian, word2.bigEndian)
        Swift.withUnsafeBytes(of: &words) { _ = writeBytes($0) }
    }

    /// Writes a response whose only body is `value` (e.g. an error message or a config).
    @inlinable
    public mutating func writeResponse(
        opcode: Opcode, status: Status, opaque: UInt32, cas: UInt64 = 0, datatype: UInt8 = 0, value: [UInt8] = []
    ) {
        writeResponseHeader(
            opcode: opcode, status: status, opaque: opaque, cas: cas, datatype: datatype, valueLength: value.count)
        writeBytes(value)
    }

    /// Writes a complete request. Uses magic 0x08 when `framingExtras` is not empty.
    @inlinable
    public mutating func writeRequest(
        opcode: Opcode, vbucket: UInt16 = 0, opaque: UInt32 = 0, cas: UInt64 = 0, datatype: UInt8 = 0,
        framingExtras: [UInt8] = [], extras: [UInt8] = [], key: [UInt8] = [], value: [UInt8] = []
    ) {
        if framingExtras.isEmpty {
            precondition(key.count <= 65535, "key too long for a frame: \(key.count)")
            writeInteger(Magic.clientRequest.rawValue)
            writeInteger(opcode.rawValue)
            writeInteger(UInt16(key.count))
        } else {
            precondition(key.count <= 255 && framingExtras.count <= 255, "alt-request sections too long")
            writeInteger(Magic.altClientRequest.rawValue)
            writeInteger(opcode.rawValue)
            writeInteger(UInt8(framingExtras.count))
            writeInteger(UInt8(key.count))
        }
        writeInteger(UInt8(extras.count))
        writeInteger(datatype)
        writeInteger(vbucket)
        writeInteger(UInt32(framingExtras.count + extras.count + key.count + value.count))
        writeInteger(opaque)
        writeInteger(cas)
        writeBytes(framingExtras)
        writeBytes(extras)
        writeBytes(key)
        writeBytes(value)
    }

    /// Writes a server-initiated request (magic 0x82), e.g. a cluster-map change notification.
    @inlinable
    public mutating func writeServerRequest(
        opcode: Opcode, opaque: UInt32 = 0, datatype: UInt8 = 0, extras: [UInt8] = [], key: [UInt8] = [],
        value: [UInt8] = []
    ) {
        writeInteger(Magic.serverRequest.rawValue)
        writeInteger(opcode.rawValue)
        writeInteger(UInt16(key.count))
        writeInteger(UInt8(extras.count))
        writeInteger(datatype)
        writeInteger(UInt16(0))
        writeInteger(UInt32(extras.count + key.count + value.count))
        writeInteger(opaque)
        writeInteger(UInt64(0))
        writeBytes(extras)
        writeBytes(key)
        writeBytes(value)
    }
}
