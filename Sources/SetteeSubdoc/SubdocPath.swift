import SetteeCore

/// One step of a sub-document path.
public enum SubdocPathComponent: Sendable, Equatable {
    /// An object member, named by the bytes that stand between the quotes in the document: JSON escapes
    /// are kept, so `a\"b` in a path matches the member written `"a\"b"`.
    case key([UInt8])
    /// An array position from 0; -1 is the last element.
    case index(Int)
}

/// A parsed sub-document path (N1QL syntax, as kv_engine's `docs/SubDocument.md` defines it):
/// components separated by `.`, array positions in brackets right after their array (`a.b[0].c`,
/// `[1]` at the top of an array document), `[-1]` for the last element, and backticks around a
/// component that holds `.`, `[` or `]` (two backticks inside stand for one).
///
/// With the XATTR flag the first component is the extended attribute's name, taken literally up to the
/// first `.` or `[` (no backtick escaping); the rest parses as a body path.
public struct SubdocPath: Sendable, Equatable {
    public var components: [SubdocPathComponent]

    public init(components: [SubdocPathComponent]) { self.components = components }

    /// The empty path: the whole document.
    public var isEmpty: Bool { components.isEmpty }

    /// Parses path bytes a client sent. Empty bytes are the empty path (the document root), except with
    /// `xattr`, where the attribute name is required.
    public static func parse(_ bytes: [UInt8], xattr: Bool = false) throws(SubdocError) -> SubdocPath {
        guard bytes.count <= Limits.subdocMaxPathLength else { throw .pathTooBig }
        if bytes.isEmpty {
            if xattr { throw .pathInvalid }
            return SubdocPath(components: [])
        }
        var components: [SubdocPathComponent] = []
        let n = bytes.count
        var i = 0
        // True at the start and right after a '.', where a member name must follow.
        var expectName = true
        while i < n {
            if bytes[i] == Ascii.openBracket {
                // An index follows its array directly ("a[0]", "a[0][1]") or opens the path ("[0]").
                guard !expectName || components.isEmpty else { throw .pathInvalid }
                i += 1
                let negative = i < n && bytes[i] == Ascii.minus
                if negative { i += 1 }
                var value = 0
                var digits = 0
                while i < n, bytes[i] >= Ascii.zero, bytes[i] <= Ascii.nine {
                    // 18 digits stay below Int.max: no overflow, and no document has that many elements.
                    guard digits < 18 else { throw .pathInvalid }
                    value = value * 10 + Int(bytes[i] - Ascii.zero)
                    digits += 1
                    i += 1
                }
                guard digits > 0, i < n, bytes[i] == Ascii.closeBracket else { throw .pathInvalid }
                i += 1
                if negative {
                    // Only -1 (the last element) has a meaning.
                    guard value == 1 else { throw .pathInvalid }
                    components.append(.index(-1))
                } else {
                    components.append(.index(value))
                }
                expectName = false
            } else {
                guard expectName else { throw .pathInvalid }
                var name: [UInt8] = []
                if xattr && components.isEmpty {
                    while i < n, bytes[i] != Ascii.dot, bytes[i] != Ascii.openBracket {
                        name.append(bytes[i])
                        i += 1
                    }
                } else {
                    scan: while i < n {
                        switch bytes[i] {
                        case Ascii.dot, Ascii.openBracket: break scan
                        case Ascii.closeBracket: throw .pathInvalid
                        case Ascii.backtick:
                            i += 1
                            var closed = false
                            while i < n {
                                if bytes[i] == Ascii.backtick {
                                    if i + 1 < n && bytes[i + 1] == Ascii.backtick {
                                        name.append(Ascii.backtick)
                                        i += 2
                                        continue
                                    }
                                    i += 1
                                    closed = true
                                    break
                                }
                                name.append(bytes[i])
                                i += 1
                            }
                            guard closed else { throw .pathInvalid }
                        default:
                            name.append(bytes[i])
                            i += 1
                        }
                    }
                }
                guard !name.isEmpty else { throw .pathInvalid }
                components.append(.key(name))
                expectName = false
            }
            guard components.count <= Limits.subdocMaxPathComponents else { throw .pathTooBig }
            if i < n {
                if bytes[i] == Ascii.dot {
                    i += 1
                    guard i < n else { throw .pathInvalid }  // a trailing '.'
                    expectName = true
                } else if bytes[i] != Ascii.openBracket {
                    throw .pathInvalid
                }
            }
        }
        return SubdocPath(components: components)
    }
}

/// The ASCII bytes the path and JSON scanners compare against.
enum Ascii {
    static let dot = UInt8(ascii: ".")
    static let openBracket = UInt8(ascii: "[")
    static let closeBracket = UInt8(ascii: "]")
    static let openBrace = UInt8(ascii: "{")
    static let closeBrace = UInt8(ascii: "}")
    static let backtick = UInt8(ascii: "`")
    static let minus = UInt8(ascii: "-")
    static let plus = UInt8(ascii: "+")
    static let zero = UInt8(ascii: "0")
    static let nine = UInt8(ascii: "9")
    static let quote = UInt8(ascii: "\"")
    static let backslash = UInt8(ascii: "\\")
    static let colon = UInt8(ascii: ":")
    static let comma = UInt8(ascii: ",")
}
