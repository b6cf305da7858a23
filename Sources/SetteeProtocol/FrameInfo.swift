import NIOCore

/// Durability level of a synchronous write (frame info id 1).
public struct DurabilityLevel: RawRepresentable, Hashable, Sendable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// In memory on a majority of copies.
    public static let majority = DurabilityLevel(rawValue: 1)
    /// Majority, and persisted on the active.
    public static let majorityAndPersistActive = DurabilityLevel(rawValue: 2)
    /// Persisted on a majority of copies.
    public static let persistToMajority = DurabilityLevel(rawValue: 3)
    public var isValid: Bool { (1...3).contains(rawValue) }
    /// Whether the active copy must be on disk before the write is acknowledged.
    public var requiresPersistenceOnActive: Bool { rawValue >= 2 }
}

/// What a request's framing extras asked for.
public struct FrameInfos: Sendable, Equatable {
    public var durabilityLevel: DurabilityLevel?
    /// Milliseconds, when the client gave one.
    public var durabilityTimeout: UInt16?
    /// Keep the document's current expiry (frame info id 5).
    public var preserveTTL = false
    public init() {}
}

public enum FrameInfoError: Error, Equatable, Sendable {
    /// Truncated entry or a length that does not fit its id.
    case malformed
    /// An id we do not support; kv_engine answers EINVAL (or NOT_SUPPORTED) for those.
    case unsupported(Int)
}

/// Parses the framing-extras section: a list of entries, each one byte of (id << 4 | length), with
/// 15 in either nibble meaning an escape byte follows whose value is added to 15.
public enum FrameInfoParser {
    public static func parse(_ section: ByteBuffer) throws(FrameInfoError) -> FrameInfos {
        var buf = section
        var infos = FrameInfos()
        while buf.readableBytes > 0 {
            let first = buf.readInteger(as: UInt8.self)!
            var id = Int(first >> 4)
            var length = Int(first & 0x0f)
            if id == 15 {
                guard let esc = buf.readInteger(as: UInt8.self) else { throw .malformed }
                id = 15 + Int(esc)
            }
            if length == 15 {
                guard let esc = buf.readInteger(as: UInt8.self) else { throw .malformed }
                length = 15 + Int(esc)
            }
            guard var payload = buf.readSlice(length: length) else { throw .malformed }
            switch id {
            case 0:  // barrier / reorder: we always execute in order, so it is satisfied
                guard length == 0 else { throw .malformed }
            case 1:
                guard length == 1 || length == 3 else { throw .malformed }
                infos.durabilityLevel = DurabilityLevel(rawValue: payload.readInteger(as: UInt8.self)!)
                if length == 3 { infos.durabilityTimeout = payload.readInteger(as: UInt16.self)! }
            case 5:
                guard length == 0 else { throw .malformed }
                infos.preserveTTL = true
            default:
                throw .unsupported(id)
            }
        }
        return infos
    }

    /// Encodes a durability requirement (for clients and tests).
    public static func durability(_ level: DurabilityLevel, timeoutMs: UInt16? = nil) -> [UInt8] {
        if let t = timeoutMs { return [0x13, level.rawValue, UInt8(t >> 8), UInt8(t & 0xff)] }
        return [0x11, level.rawValue]
    }

    /// Encodes preserve-TTL.
    public static let preserveTTL: [UInt8] = [0x50]
}
