import SetteeCore

/// One stored extended attribute: its name and its JSON value, as bytes.
public struct XattrPair: Sendable, Equatable {
    public var key: [UInt8]
    public var value: [UInt8]
    public init(key: [UInt8], value: [UInt8]) {
        self.key = key
        self.value = value
    }
}

/// The extended attributes stored in front of a document's body when its datatype has the XATTR bit (0x04),
/// in the binary protocol's layout (kv_engine `docs/BinaryProtocol.md`, "Data Types"):
///
/// ```
/// total length u32 (the bytes that follow, up to the body)
/// { pair length u32, key, 0x00, value, 0x00 }…   (the pair length counts key, value and both 0x00)
/// body
/// ```
///
/// All lengths are big-endian. A blob is accepted only whole: every pair inside the total, names valid
/// (`SubdocXattr.checkName`) and distinct, values JSON, the section at most `Limits.subdocMaxXattrSize`.
public struct XattrBlob: Sendable, Equatable {
    public private(set) var pairs: [XattrPair]

    public init() { pairs = [] }

    /// Splits a stored value into its attributes and its body; nil when the section is malformed.
    public static func split(_ value: [UInt8]) -> (xattrs: XattrBlob, body: [UInt8])? {
        guard value.count >= 4 else { return nil }
        let total = Int(readUInt32(value, at: 0))
        guard total <= value.count - 4, total <= Limits.subdocMaxXattrSize else { return nil }
        var blob = XattrBlob()
        // Names seen so far, as a set once there are many: a search of `pairs` per attribute made a 2 MiB section of
        // ~200,000 tiny ones cost tens of seconds on the event loop. A usual section (a gateway's `_sync` and a few
        // more) is searched as before, without building a set on every read.
        var names: Set<[UInt8]>?
        var i = 4
        let end = 4 + total
        while i < end {
            guard end - i >= 4 else { return nil }
            let length = Int(readUInt32(value, at: i))
            i += 4
            guard length >= 4, length <= end - i else { return nil }
            let pair = value[i..<(i + length)]
            // key 0x00 value 0x00: the key ends at the first zero, the value at the pair's last byte.
            guard pair.last == 0, let zero = pair.firstIndex(of: 0), zero < pair.endIndex - 1 else { return nil }
            let key = Array(pair[pair.startIndex..<zero])
            let json = Array(pair[(zero + 1)..<(pair.endIndex - 1)])
            if names == nil && blob.pairs.count >= Self.namesSetThreshold { names = Set(blob.pairs.map(\.key)) }
            let isNew = names == nil ? blob.value(of: key) == nil : names?.insert(key).inserted == true
            guard (try? SubdocXattr.checkName(key)) != nil, key.first != UInt8(ascii: "$"), isNew,
                (try? SubdocDocument(validating: json)) != nil
            else { return nil }
            blob.pairs.append(XattrPair(key: key, value: json))
            i += length
        }
        return (blob, Array(value[end...]))
    }

    /// Attributes after which `split` checks names against a set rather than a search of the pairs.
    static let namesSetThreshold = 16

    /// The value of attribute `key`, nil when there is none.
    public func value(of key: [UInt8]) -> [UInt8]? { pairs.first { $0.key == key }?.value }

    /// Sets (adds or replaces) attribute `key`; the caller has validated the name and the JSON value.
    public mutating func set(_ key: [UInt8], to value: [UInt8]) {
        if let index = pairs.firstIndex(where: { $0.key == key }) {
            pairs[index].value = value
        } else {
            pairs.append(XattrPair(key: key, value: value))
        }
    }

    /// Removes attribute `key` (nothing if there is none).
    public mutating func remove(_ key: [UInt8]) { pairs.removeAll { $0.key == key } }

    /// The system attributes only (names starting with `_`): what a tombstone keeps.
    public var systemOnly: XattrBlob {
        var blob = self
        blob.pairs.removeAll { $0.key.first != UInt8(ascii: "_") }
        return blob
    }

    /// The user attributes only (names not starting with `_`): what a reader without SystemXattrRead sees.
    public var userOnly: XattrBlob {
        var blob = self
        blob.pairs.removeAll { $0.key.first == UInt8(ascii: "_") }
        return blob
    }

    /// Where the value of attribute `key` starts in `encoded(body:)`, nil when there is none.
    public func valueOffset(of key: [UInt8]) -> Int? {
        var offset = 4
        for pair in pairs {
            if pair.key == key { return offset + 4 + pair.key.count + 1 }
            offset += 4 + pair.key.count + pair.value.count + 2
        }
        return nil
    }

    /// The section's size in bytes, its 4-byte total length included.
    public var encodedSize: Int { pairs.reduce(4) { $0 + 4 + $1.key.count + $1.value.count + 2 } }

    /// The stored bytes of the system attributes (`_…`) and of the user ones, pair by pair (length u32, name, 0,
    /// value, 0), which `Limits.subdocMaxSystemXattrSize` / `subdocMaxUserXattrSize` bound apart.
    public var sizes: (system: Int, user: Int) {
        pairs.reduce(into: (system: 0, user: 0)) { sizes, pair in
            let n = 4 + pair.key.count + pair.value.count + 2
            if pair.key.first == UInt8(ascii: "_") { sizes.system += n } else { sizes.user += n }
        }
    }

    /// Whether the user or the system attributes exceed their limit.
    public var exceedsLimits: Bool {
        let (system, user) = sizes
        return system > Limits.subdocMaxSystemXattrSize || user > Limits.subdocMaxUserXattrSize
    }

    /// The stored value: the section (if any attribute) then `body`.
    public func encoded(body: [UInt8]) -> [UInt8] {
        guard !pairs.isEmpty else { return body }
        var out: [UInt8] = []
        out.reserveCapacity(encodedSize + body.count)
        Self.append(UInt32(truncatingIfNeeded: encodedSize - 4), to: &out)
        for pair in pairs {
            Self.append(UInt32(truncatingIfNeeded: pair.key.count + pair.value.count + 2), to: &out)
            out += pair.key
            out.append(0)
            out += pair.value
            out.append(0)
        }
        return out + body
    }

    private static func readUInt32(_ bytes: [UInt8], at i: Int) -> UInt32 {
        UInt32(bytes[i]) << 24 | UInt32(bytes[i + 1]) << 16 | UInt32(bytes[i + 2]) << 8 | UInt32(bytes[i + 3])
    }

    private static func append(_ value: UInt32, to out: inout [UInt8]) {
        for shift in [24, 16, 8, 0] { out.append(UInt8(truncatingIfNeeded: value >> UInt32(shift))) }
    }
}
