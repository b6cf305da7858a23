import SetteeJSON

/// A config error: the dotted path of the offending field and what is wrong with it
/// (`databases.demo.revs_limt: unknown field`).
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public var path: String
    public var message: String
    public init(path: String, message: String) {
        self.path = path
        self.message = message
    }
    public var description: String { path.isEmpty ? message : "\(path): \(message)" }
}

/// Reads the members of one config object, remembering which were used so that `finish()` can name
/// the first unknown one. Keys match case-insensitively, as Sync Gateway's Go decoder does (`CORS` and
/// `cors`, `adminInterface` and `AdminInterface` are the same field).
struct ConfigObject {
    let path: String
    private let members: [(String, JSON)]
    private var used: Set<String> = []

    init(_ json: JSON, path: String) throws(ConfigError) {
        guard case .object(let members) = json else { throw ConfigError(path: path, message: "must be an object") }
        self.path = path
        self.members = members
    }

    func child(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    /// The raw value of `key` (nil when absent or null).
    mutating func value(_ key: String) -> (key: String, value: JSON)? {
        let lower = key.lowercased()
        used.insert(lower)
        guard let member = members.first(where: { $0.0.lowercased() == lower }) else { return nil }
        if case .null = member.1 { return nil }
        return member
    }

    mutating func string(_ key: String) throws(ConfigError) -> String? {
        guard let (k, v) = value(key) else { return nil }
        guard let s = v.stringValue else { throw ConfigError(path: child(k), message: "must be a string") }
        return s
    }

    mutating func bool(_ key: String) throws(ConfigError) -> Bool? {
        guard let (k, v) = value(key) else { return nil }
        guard let b = v.boolValue else { throw ConfigError(path: child(k), message: "must be true or false") }
        return b
    }

    mutating func int(_ key: String, in range: ClosedRange<Int>) throws(ConfigError) -> Int? {
        guard let (k, v) = value(key) else { return nil }
        guard let n = v.intValue else { throw ConfigError(path: child(k), message: "must be an integer") }
        guard range.contains(n) else {
            throw ConfigError(path: child(k), message: "must be between \(range.lowerBound) and \(range.upperBound)")
        }
        return n
    }

    /// A number within `range` (an integer counts); a JSON string is refused, as for `int`.
    mutating func double(_ key: String, in range: ClosedRange<Double>) throws(ConfigError) -> Double? {
        guard let (k, v) = value(key) else { return nil }
        guard let n = v.numberValue, n.isFinite else { throw ConfigError(path: child(k), message: "must be a number") }
        guard range.contains(n) else {
            throw ConfigError(path: child(k), message: "must be between \(range.lowerBound) and \(range.upperBound)")
        }
        return n
    }

    /// An array of strings; a lone string counts as a one-element array (Sync Gateway accepts both).
    mutating func strings(_ key: String) throws(ConfigError) -> [String]? {
        guard let (k, v) = value(key) else { return nil }
        if let s = v.stringValue { return [s] }
        guard let items = v.arrayValue else {
            throw ConfigError(path: child(k), message: "must be an array of strings")
        }
        var out: [String] = []
        for (i, item) in items.enumerated() {
            guard let s = item.stringValue else {
                throw ConfigError(path: "\(child(k))[\(i)]", message: "must be a string")
            }
            out.append(s)
        }
        return out
    }

    /// The members of a nested object, each with its path.
    mutating func objectMembers(_ key: String) throws(ConfigError) -> [(name: String, value: JSON, path: String)]? {
        guard let (k, v) = value(key) else { return nil }
        guard case .object(let members) = v else { throw ConfigError(path: child(k), message: "must be an object") }
        return members.map { (name: $0.0, value: $0.1, path: "\(child(k)).\($0.0)") }
    }

    /// Throws for the first member no reader asked for.
    func finish() throws(ConfigError) {
        if let unknown = members.first(where: { !used.contains($0.0.lowercased()) }) {
            throw ConfigError(path: child(unknown.0), message: "unknown field")
        }
    }
}
