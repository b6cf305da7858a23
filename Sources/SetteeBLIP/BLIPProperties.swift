/// A message's properties as bytes (BLIP Protocol 3.0, §3.4): each name and value as UTF-8 ending in a NUL, in
/// order, no padding. The message data then starts with the block's length as a varint.
public enum BLIPProperties {
    /// The property block of `properties`.
    /// - Throws: `BLIPProtocolViolation.cannotSend` when a name or value contains a NUL (it would end the string).
    public static func encode(_ properties: [(name: String, value: String)]) throws(BLIPProtocolViolation) -> [UInt8] {
        var out: [UInt8] = []
        for (name, value) in properties {
            for s in [name, value] {
                if s.utf8.contains(0) { throw .cannotSend("property \(name.debugDescription) contains a NUL byte") }
                out.append(contentsOf: s.utf8)
                out.append(0)
            }
        }
        return out
    }

    /// The message data of a message: varint properties length, the property block, the body.
    public static func encodeMessageData(
        _ properties: [(name: String, value: String)], body: [UInt8]
    ) throws(BLIPProtocolViolation) -> [UInt8] {
        let block = try encode(properties)
        var out: [UInt8] = []
        out.reserveCapacity(BLIPVarint.maxLength + block.count + body.count)
        BLIPVarint.encode(UInt64(block.count), into: &out)
        out.append(contentsOf: block)
        out.append(contentsOf: body)
        return out
    }

    /// Parses a property block.
    ///
    /// A block must end in a NUL and hold an even number of strings, each valid UTF-8 (§3.8). One leniency: a block
    /// with an odd count whose last string is empty is read without it, since pythonblip 0.3.1 writes an empty
    /// property set as a lone NUL.
    /// - Throws: `BLIPProtocolViolation.badProperties`.
    public static func decode(_ block: ArraySlice<UInt8>) throws(BLIPProtocolViolation) -> [(
        name: String, value: String
    )] {
        guard let last = block.last else { return [] }
        guard last == 0 else { throw .badProperties("the block does not end with a NUL") }
        var strings = block.dropLast().split(separator: 0, omittingEmptySubsequences: false)
        if strings.count % 2 == 1 {
            guard strings.last?.isEmpty == true else { throw .badProperties("a name without a value") }
            strings.removeLast()
        }
        var out: [(name: String, value: String)] = []
        out.reserveCapacity(strings.count / 2)
        var i = strings.startIndex
        while i + 1 < strings.endIndex {
            guard let name = String(validating: strings[i], as: UTF8.self),
                let value = String(validating: strings[i + 1], as: UTF8.self)
            else { throw .badProperties("a name or value is not UTF-8") }
            out.append((name: name, value: value))
            i += 2
        }
        return out
    }

    /// Splits complete message data into properties and body.
    /// - Throws: `BLIPProtocolViolation.badVarint`, `.propertiesTooLarge`, `.badProperties`.
    public static func decodeMessageData(
        _ data: ArraySlice<UInt8>, maxPropertiesBytes: Int
    ) throws(BLIPProtocolViolation) -> (properties: [(name: String, value: String)], body: [UInt8]) {
        var i = data.startIndex
        let length: UInt64
        do {
            length = try BLIPVarint.decode(data, at: &i)
        } catch {
            throw .badVarint(field: "properties length", error)
        }
        guard length <= UInt64(maxPropertiesBytes) else { throw .propertiesTooLarge(length, limit: maxPropertiesBytes) }
        let n = Int(length)
        guard data.endIndex - i >= n else { throw .badProperties("the message ends inside its properties") }
        let properties = try decode(data[i..<(i + n)])
        return (properties, Array(data[(i + n)...]))
    }
}
