import SetteeTestSupport
import Testing

@testable import SetteeStorage

@Suite(.onTestThreads) struct DocKeyTests {
    /// Every length from empty through well past the 24-byte inline capacity gives its bytes back unchanged.
    @Test func bytesRoundTripAtEveryLength() {
        for n in 0...64 {
            let key = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 1) }
            #expect(DocKey(key).bytes == key, "length \(n)")
        }
    }

    /// Keys that share their inline words but differ in length (trailing zero bytes) or only past the
    /// inline prefix are different keys, and a dictionary keeps them apart.
    @Test func nearKeysStayDistinct() {
        let base: [UInt8] = Array("user::12345".utf8)
        let zeroPadded = base + [0]
        let longA = [UInt8](repeating: 7, count: 30) + [1]
        let longB = [UInt8](repeating: 7, count: 30) + [2]
        let exactly24 = [UInt8](repeating: 9, count: 24)
        let exactly25 = exactly24 + [9]
        let keys = [base, zeroPadded, longA, longB, exactly24, exactly25, []]
        for (i, a) in keys.enumerated() {
            for (j, b) in keys.enumerated() {
                #expect((DocKey(a) == DocKey(b)) == (i == j), "\(i) vs \(j)")
            }
        }
        var table: [DocKey: Int] = [:]
        for (i, k) in keys.enumerated() { table[DocKey(k)] = i }
        #expect(table.count == keys.count)
        for (i, k) in keys.enumerated() { #expect(table[DocKey(k)] == i) }
    }

    /// Equal keys hash equally whatever array they were built from (a copy, a slice turned array).
    @Test func equalKeysHashEqually() {
        for n in [0, 5, 16, 17, 24, 25, 200] {
            let a = (0..<n).map { UInt8(truncatingIfNeeded: $0) }
            let b = Array(([0xFF] + a)[1...])
            #expect(DocKey(a) == DocKey(b))
            #expect(DocKey(a).hashValue == DocKey(b).hashValue)
        }
    }

    /// A key built from bytes in place (a frame's key) is the same key, with the same hash, as one built from an
    /// array, at every length across the inline capacity; the long form keeps its whole key.
    @Test func rawBytesMakeTheSameKey() {
        for n in 0...64 {
            let key = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 53 &+ 3) }
            let raw = key.withUnsafeBytes { DocKey($0) }
            #expect(raw == DocKey(key) && raw.hashValue == DocKey(key).hashValue, "length \(n)")
            #expect(raw.bytes == key, "length \(n)")
        }
    }
}
