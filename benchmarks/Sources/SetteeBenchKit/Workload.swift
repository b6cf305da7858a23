import SetteeCore

/// What each connection sends: the operation mix, the key space and the value size.
public struct Workload: Sendable, Codable, Hashable {
    /// Percent of GETs; the rest are SETs.
    public var getPercent: Int
    public var valueSize: Int
    public var keys: Int
    public var keyPrefix: String

    public init(getPercent: Int, valueSize: Int, keys: Int, keyPrefix: String = "bench::") {
        precondition((0...100).contains(getPercent), "get percent \(getPercent) outside 0...100")
        precondition(keys > 0 && valueSize >= 0, "keys \(keys) / value size \(valueSize)")
        self.getPercent = getPercent
        self.valueSize = valueSize
        self.keys = keys
        self.keyPrefix = keyPrefix
    }

    /// Parses `get=90,set=10` (the two must add up to 100).
    public static func parseMix(_ text: String) -> Int? {
        var get: Int?
        var set: Int?
        for part in text.split(separator: ",") {
            let kv = part.split(separator: "=", maxSplits: 1)
            guard kv.count == 2, let n = Int(String(kv[1]).filter { !$0.isWhitespace }), n >= 0 else { return nil }
            switch String(kv[0]).filter({ !$0.isWhitespace }).lowercased() {
            case "get": get = n
            case "set": set = n
            default: return nil
            }
        }
        switch (get, set) {
        case let (g?, s?) where g + s == 100: return g
        case let (g?, nil) where g <= 100: return g
        case let (nil, s?) where s <= 100: return 100 - s
        default: return nil
        }
    }
}

/// The encoded keys, their vBuckets and the value, built once per run and shared read-only by
/// every connection, so the hot path only copies bytes.
public final class KeySpace: Sendable {
    public let keys: [[UInt8]]
    public let vbuckets: [UInt16]
    public let value: [UInt8]

    public init(_ workload: Workload) {
        var keys: [[UInt8]] = []
        keys.reserveCapacity(workload.keys)
        var vbuckets: [UInt16] = []
        vbuckets.reserveCapacity(workload.keys)
        let width = String(workload.keys - 1).count
        for i in 0..<workload.keys {
            let digits = String(i)
            let key = Array((workload.keyPrefix + String(repeating: "0", count: width - digits.count) + digits).utf8)
            keys.append(key)
            vbuckets.append(VBucketHash.vbucket(forKey: key).rawValue)
        }
        self.keys = keys
        self.vbuckets = vbuckets
        // Printable, not all one byte: a compressing server cannot shrink it to nothing.
        var rng = SplitMix64(seed: 0x5E77EE)
        self.value = (0..<workload.valueSize).map { _ in UInt8(ascii: "a") + UInt8(rng.next() % 26) }
    }
}
