import NIOCore

/// One decoded memcached-binary frame (request or response), its sections as slices of the read
/// buffer: decoding copies no bytes.
///
/// Layout (all integers big-endian), 24-byte header then body:
/// ```
///  0 magic | 1 opcode | 2-3 key length (or: 2 framing-extras length, 3 key length, for magic 0x08/0x18)
///  4 extras length | 5 datatype | 6-7 vBucket (requests) or status (responses)
///  8-11 total body length | 12-15 opaque | 16-23 CAS
///  body: [framing extras][extras][key][value]
/// ```
public struct Frame: Sendable {
    public var magic: Magic
    public var opcode: Opcode
    public var datatype: UInt8
    /// vBucket id on requests, status on responses.
    public var vbucketOrStatus: UInt16
    public var opaque: UInt32
    public var cas: UInt64
    public var framingExtras: ByteBuffer
    public var extras: ByteBuffer
    public var key: ByteBuffer
    public var value: ByteBuffer

    public init(
        magic: Magic, opcode: Opcode, datatype: UInt8 = 0, vbucketOrStatus: UInt16 = 0, opaque: UInt32 = 0,
        cas: UInt64 = 0, framingExtras: ByteBuffer = ByteBuffer(), extras: ByteBuffer = ByteBuffer(),
        key: ByteBuffer = ByteBuffer(), value: ByteBuffer = ByteBuffer()
    ) {
        self.magic = magic
        self.opcode = opcode
        self.datatype = datatype
        self.vbucketOrStatus = vbucketOrStatus
        self.opaque = opaque
        self.cas = cas
        self.framingExtras = framingExtras
        self.extras = extras
        self.key = key
        self.value = value
    }

    @inlinable public var status: Status { Status(vbucketOrStatus) }
    @inlinable public var vbucket: UInt16 { vbucketOrStatus }
    /// Length of the whole body as it is on the wire.
    @inlinable public var bodyLength: Int {
        framingExtras.readableBytes + extras.readableBytes + key.readableBytes + value.readableBytes
    }

    public static let headerLength = 24
}

/// The fixed header alone, available before the body has arrived: enough to answer an oversized
/// frame with E2BIG and skip its body.
public struct FrameHeader: Sendable, Equatable {
    public var magic: Magic
    public var opcode: Opcode
    public var framingExtrasLength: Int
    public var keyLength: Int
    public var extrasLength: Int
    public var datatype: UInt8
    public var vbucketOrStatus: UInt16
    public var bodyLength: Int
    public var opaque: UInt32
    public var cas: UInt64

    @inlinable
    public init(
        magic: Magic, opcode: Opcode, framingExtrasLength: Int, keyLength: Int, extrasLength: Int, datatype: UInt8,
        vbucketOrStatus: UInt16, bodyLength: Int, opaque: UInt32, cas: UInt64
    ) {
        self.magic = magic
        self.opcode = opcode
        self.framingExtrasLength = framingExtrasLength
        self.keyLength = keyLength
        self.extrasLength = extrasLength
        self.datatype = datatype
        self.vbucketOrStatus = vbucketOrStatus
        self.bodyLength = bodyLength
        self.opaque = opaque
        self.cas = cas
    }
}

extension FrameHeader {
    /// The header from its words as read big-endian from the wire: bytes 0-7, 8-15 and the CAS (16-23). The one
    /// place that knows where each field sits, for `FrameDecoder.peekHeader` and its look-ahead (ADR 0065, 0114).
    /// `magic` is the first byte, already judged by the caller: it decides how bytes 2-3 split.
    @inlinable
    init(magic: Magic, word0: UInt64, word1: UInt64, cas: UInt64) {
        let framingExtrasLength: Int
        let keyLength: Int
        if magic.hasFramingExtras {
            framingExtrasLength = Int(UInt8(truncatingIfNeeded: word0 >> 40))
            keyLength = Int(UInt8(truncatingIfNeeded: word0 >> 32))
        } else {
            framingExtrasLength = 0
            keyLength = Int(UInt16(truncatingIfNeeded: word0 >> 32))
        }
        self.init(
            magic: magic, opcode: Opcode(UInt8(truncatingIfNeeded: word0 >> 48)),
            framingExtrasLength: framingExtrasLength, keyLength: keyLength,
            extrasLength: Int(UInt8(truncatingIfNeeded: word0 >> 24)), datatype: UInt8(truncatingIfNeeded: word0 >> 16),
            vbucketOrStatus: UInt16(truncatingIfNeeded: word0),
            bodyLength: Int(UInt32(truncatingIfNeeded: word1 >> 32)),
            opaque: UInt32(truncatingIfNeeded: word1), cas: cas)
    }

    /// Whether framing extras, extras and key fit in the declared body (each length is under 2^32, so the sum cannot
    /// overflow an Int).
    @inlinable
    var sectionsFitBody: Bool { framingExtrasLength + extrasLength + keyLength <= bodyLength }
}
