/// One BLIP frame, the unit each binary WebSocket message carries (BLIP Protocol 3.0, §3.5):
///
///     varint message number | varint flags | data ... | 4-byte big-endian CRC-32 (all but ACKs)
///
/// The data is a slice of the encoded message (§3.4: varint properties length, properties, body), deflated when
/// the `compressed` flag is set. An ACK's data is one varint: the bytes of that message received so far (§3.7).
public struct BLIPFrame: Sendable, Equatable {
    /// The flags varint (§3.5). Bits above 0x40 are reserved and ignored; the type is the low three bits.
    public struct Flags: OptionSet, Sendable, Hashable {
        public var rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// The frame's data went through the deflate context (§3.6).
        public static let compressed = Flags(rawValue: 0x08)
        /// The message is sent ahead of normal ones (§3.2).
        public static let urgent = Flags(rawValue: 0x10)
        /// A request that wants no response (§1.1).
        public static let noReply = Flags(rawValue: 0x20)
        /// More frames of this message follow (§3.2).
        public static let moreComing = Flags(rawValue: 0x40)

        /// The message type bits (`MSG` 0, `RPY` 1, `ERR` 2, `ACKMSG` 4, `ACKRPY` 5; 3, 6 and 7 are undefined).
        public var typeBits: UInt8 { rawValue & 0x07 }

        public init(type: UInt8, _ flags: Flags = []) { rawValue = (type & 0x07) | (flags.rawValue & 0xF8) }
    }

    /// The message number: the request's number for every frame of a request, its response and their ACKs.
    public var number: UInt64
    public var flags: Flags
    /// The bytes after the header: data and checksum for requests and responses, the byte-count varint for ACKs.
    public var payload: ArraySlice<UInt8>

    public init(number: UInt64, flags: Flags, payload: ArraySlice<UInt8>) {
        self.number = number
        self.flags = flags
        self.payload = payload
    }

    /// Whether this is an ACK (type 4 or 5), which has no checksum and never passes the deflate context.
    public var isAck: Bool { flags.typeBits == 4 || flags.typeBits == 5 }

    /// Splits a frame into header and payload.
    /// - Parameter maxBytes: the largest frame accepted (`Limits.blipMaxFrameBytes`).
    /// - Throws: `BLIPProtocolViolation.emptyFrame`, `.frameTooLarge`, `.badVarint` (number or flags).
    public static func parse(_ bytes: [UInt8], maxBytes: Int) throws(BLIPProtocolViolation) -> BLIPFrame {
        guard !bytes.isEmpty else { throw .emptyFrame }
        guard bytes.count <= maxBytes else { throw .frameTooLarge(bytes.count, limit: maxBytes) }
        var i = bytes.startIndex
        let number: UInt64
        let flags: UInt64
        do {
            number = try BLIPVarint.decode(bytes, at: &i)
        } catch {
            throw .badVarint(field: "message number", error)
        }
        do {
            flags = try BLIPVarint.decode(bytes, at: &i)
        } catch {
            throw .badVarint(field: "frame flags", error)
        }
        return BLIPFrame(number: number, flags: Flags(rawValue: UInt8(truncatingIfNeeded: flags)), payload: bytes[i...])
    }

    /// The header bytes of a frame: the number and flags varints.
    public static func header(number: UInt64, flags: Flags) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(12)
        BLIPVarint.encode(number, into: &out)
        BLIPVarint.encode(UInt64(flags.rawValue), into: &out)
        return out
    }

    /// An ACK frame (type 4 for a request's frames, 5 for a response's), urgent and no-reply as LiteCore and
    /// go-blip send them, carrying `bytesReceived` (§3.7).
    public static func ack(number: UInt64, ofResponse: Bool, bytesReceived: UInt64) -> [UInt8] {
        var out = header(number: number, flags: Flags(type: ofResponse ? 5 : 4, [.urgent, .noReply]))
        BLIPVarint.encode(bytesReceived, into: &out)
        return out
    }

    /// A checksum's four bytes, big-endian (§3.5).
    public static func appendChecksum(_ crc: UInt32, to bytes: inout [UInt8]) {
        bytes.append(UInt8(truncatingIfNeeded: crc >> 24))
        bytes.append(UInt8(truncatingIfNeeded: crc >> 16))
        bytes.append(UInt8(truncatingIfNeeded: crc >> 8))
        bytes.append(UInt8(truncatingIfNeeded: crc))
    }

    /// Reads the big-endian checksum from the last four bytes of `payload`.
    public static func readChecksum(_ payload: ArraySlice<UInt8>) -> UInt32? {
        guard payload.count >= 4 else { return nil }
        var crc: UInt32 = 0
        for b in payload.suffix(4) { crc = crc << 8 | UInt32(b) }
        return crc
    }
}
