/// The sub-document and XATTR wire forms the tests of this target build by hand, byte by byte (big-endian, as
/// the binary protocol lays them out), so each test states its input in the protocol's own terms.

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }
func u16(_ v: Int) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xff)] }
func u32(_ v: Int) -> [UInt8] {
    [UInt8(v >> 24), UInt8((v >> 16) & 0xff), UInt8((v >> 8) & 0xff), UInt8(v & 0xff)]
}

/// One `{length, key, 0, value, 0}` pair of an XATTR section.
func pair(_ key: String, _ value: String) -> [UInt8] {
    u32(key.utf8.count + value.utf8.count + 2) + bytes(key) + [0] + bytes(value) + [0]
}

/// An XATTR section: its total length, then the pairs.
func section(_ pairs: [UInt8]...) -> [UInt8] {
    let all = pairs.flatMap { $0 }
    return u32(all.count) + all
}

/// One lookup spec of a multi-path request: opcode, flags, path length, path.
func lookupSpec(_ opcode: UInt8, _ path: String, flags: UInt8 = 0) -> [UInt8] {
    [opcode, flags] + u16(path.utf8.count) + bytes(path)
}

/// One mutation spec of a multi-path request: opcode, flags, path length, value length, path, value.
func mutationSpec(_ opcode: UInt8, _ path: String, _ value: String, flags: UInt8 = 0) -> [UInt8] {
    [opcode, flags] + u16(path.utf8.count) + u32(value.utf8.count) + bytes(path) + bytes(value)
}
