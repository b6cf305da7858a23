/// The first byte of every memcached-binary frame: who sent it and whether it carries framing extras.
public struct Magic: RawRepresentable, Hashable, Sendable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Client request, classic header (u16 key length).
    public static let clientRequest = Magic(rawValue: 0x80)
    /// Client response, classic header.
    public static let clientResponse = Magic(rawValue: 0x81)
    /// Client request with flexible framing extras (u8 framing-extras length, u8 key length).
    public static let altClientRequest = Magic(rawValue: 0x08)
    /// Client response with flexible framing extras.
    public static let altClientResponse = Magic(rawValue: 0x18)
    /// Server-initiated request (e.g. cluster-map change notification).
    public static let serverRequest = Magic(rawValue: 0x82)
    /// Client's answer to a server request.
    public static let serverResponse = Magic(rawValue: 0x83)

    /// Whether header bytes 2 and 3 are (framing-extras length, key length) rather than a u16 key length.
    @inlinable public var hasFramingExtras: Bool { rawValue == 0x08 || rawValue == 0x18 }
    /// Whether bytes 6–7 are a status (responses) rather than a vBucket id (requests).
    @inlinable public var isResponse: Bool { rawValue == 0x81 || rawValue == 0x18 || rawValue == 0x83 }
    @inlinable public var isKnown: Bool {
        switch rawValue {
        case 0x80, 0x81, 0x08, 0x18, 0x82, 0x83: return true
        default: return false
        }
    }
}
