import SetteeCore
import SetteeJSON
import Testing

@testable import SetteeSubdoc

/// Seeded random requests against random documents: whatever a client sends, the sub-document code answers
/// without trapping, and every document it decides to store is strict JSON that the shared parser reads too
/// (the editor never corrupts a document). Replays from the printed seed.
@Suite struct SubdocFuzzTests {
    private static let pieces: [String] = [
        "a", "b", "c", "n", "`x.y`", "[0]", "[1]", "[-1]", "[9]", ".", "..", "[", "]", "`", "\\\"", "é", "",
    ]
    private static let values: [String] = [
        "1", "-1", "0", "1.5", "\"s\"", "true", "null", "{}", "[]", "{\"k\":[1,{\"z\":null}]}", "[1,2]", "1,2",
        "{", "", " 7 ", "9223372036854775807", "-9223372036854775808", "\"\\u00e9\"", "01", "1.",
    ]
    private static let documents: [String] = [
        #"{"a":{"b":[1,2,{"c":"x"}]},"n":5}"#, "[1,[2,[3]],{\"a\":[]}]", "{}", "[]", "5", "\"str\"",
        #"{ "a" : [ ] , "b" : { } }"#, "not json", "{\"a\":1", #"{"n":9223372036854775807}"#,
    ]

    private static func randomPath(_ rng: inout SplitMix64) -> [UInt8] {
        var path = ""
        for _ in 0..<Int.random(in: 0...4, using: &rng) {
            if !path.isEmpty && Bool.random(using: &rng) { path += "." }
            path += pieces.randomElement(using: &rng) ?? ""
        }
        return Array(path.utf8)
    }

    private static func randomBytes(_ rng: inout SplitMix64, max: Int) -> [UInt8] {
        (0..<Int.random(in: 0...max, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
    }

    private static func spec(_ rng: inout SplitMix64, mutation: Bool) -> [UInt8] {
        let opcodes: [UInt8] =
            mutation
            ? [0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0x01, 0x04, 0xc5] : [0xc5, 0xc6, 0xd2, 0x00, 0xc8]
        let path = Self.randomPath(&rng)
        let value = mutation ? Array((values.randomElement(using: &rng) ?? "").utf8) : []
        var out: [UInt8] = [opcodes.randomElement(using: &rng) ?? 0, [0, 0, 1].randomElement(using: &rng) ?? 0]
        out += [UInt8(path.count >> 8), UInt8(path.count & 0xff)]
        if mutation {
            out += [0, 0, UInt8(value.count >> 8), UInt8(value.count & 0xff)]
        }
        return out + path + value
    }

    @Test func randomRequestsNeverCorruptADocument() throws {
        let seed = UInt64.random(in: 0...UInt64.max)
        print("SubdocFuzzTests seed \(seed)")
        var rng = SplitMix64(seed: seed)
        var stored = 0
        for _ in 0..<50_000 {
            let opcode: UInt8 =
                [0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2]
                .randomElement(using: &rng) ?? 0
            var extras: [UInt8]
            var value: [UInt8]
            if opcode == 0xd0 || opcode == 0xd1 {
                extras = [[], [0x01], [0x02], [0, 0, 0, 5]].randomElement(using: &rng) ?? []
                value = (0..<Int.random(in: 0...4, using: &rng)).flatMap { _ in
                    Self.spec(&rng, mutation: opcode == 0xd1)
                }
            } else {
                let path = Self.randomPath(&rng)
                extras = [UInt8(path.count >> 8), UInt8(path.count & 0xff), [0, 1].randomElement(using: &rng) ?? 0]
                if Bool.random(using: &rng) { extras.append([0, 1, 2].randomElement(using: &rng) ?? 0) }
                value = path + Array((Self.values.randomElement(using: &rng) ?? "").utf8)
            }
            if Int.random(in: 0..<10, using: &rng) == 0 {
                // Raw noise, as a hostile client would send.
                extras = Self.randomBytes(&rng, max: 9)
                value = Self.randomBytes(&rng, max: 40)
            }
            guard let request = try? SubdocRequest.decode(opcode: opcode, extras: extras, value: value) else {
                continue
            }
            let document =
                Bool.random(using: &rng) ? Array((Self.documents.randomElement(using: &rng) ?? "").utf8) : nil
            if case .write(let write, _) = request.execute(on: document), write.isJSON {
                stored += 1
                let bytes = XattrSection.body(of: write.value, hasXattrs: write.hasXattrs)
                let valid = (try? JSONScanner(bytes: bytes).validate()) != nil && (try? JSON.parse(bytes)) != nil
                #expect(valid, "seed \(seed): stored bytes are not JSON: \(String(decoding: bytes, as: UTF8.self))")
            }
        }
        #expect(stored > 500, "seed \(seed): too few successful mutations to mean anything (\(stored))")
    }
}
