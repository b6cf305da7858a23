import Foundation
import SetteeBLIP
import Testing

/// Frames exchanged with pythonblip 0.3.1 (an independent BLIP 3 client on PyPI, installed into `.build-py/venv` by
/// `scripts/python-deps.sh`): our frames read by its `BLIPMessenger.receive` (which checks every checksum and
/// inflates with its own zlib context), and its frames read by `BLIPConnection`.
@Suite struct BLIPPythonInteropTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let python = root.appendingPathComponent(".build-py/venv/bin/python")

    /// Reads `argv[1]` (length-prefixed frames we wrote) with pythonblip and prints one line per message; then writes
    /// to `argv[2]` frames from pythonblip's own composer (uncompressed: its `compose` deflates without the sync
    /// flush the spec requires) and two compressed frames made the spec's way with Python's zlib (one raw context,
    /// `Z_SYNC_FLUSH`, trailer removed, CRC-32 of the uncompressed data running on from pythonblip's).
    static let script = #"""
        import sys, struct, zlib
        from pythonblip.frame import BLIPMessenger, BLIPMessage
        reader = BLIPMessenger()
        data = open(sys.argv[1], 'rb').read()
        i = 0
        while i < len(data):
            (n,) = struct.unpack('>I', data[i:i+4]); frame = bytearray(data[i+4:i+4+n]); i += 4 + n
            m = reader.receive(frame)
            print("READ", m.number, m.type, int(m.compressed), ",".join(k + "=" + v for k, v in m.properties.items()), len(m.body), bytes(m.body).hex() if len(m.body) < 40 else "")
        writer = BLIPMessenger()
        out = []
        def msg(num, props, body):
            b = BLIPMessage.construct(); b.set_number(num); b.compute_flag(0); b.properties = props
            if body: b.body_import(body)
            return writer.compose(b)
        out.append(msg(1, {"Profile": "subChanges", "batch": "200"}, b''))
        out.append(msg(2, {"Profile": "getCheckpoint", "client": "cp-abc=="}, b'{"x":1}'))
        out.append(msg(3, {}, b'[1,2,3]'))
        z = zlib.compressobj(6, zlib.DEFLATED, -15)
        crc = writer.s_crc
        for n, body in [(4, b'{"docs":' + b'"abc",' * 2000 + b'0}'), (5, b'{"docs":' + b'"abc",' * 2000 + b'1}')]:
            props = b'Profile\x00rev\x00'
            data = bytes([len(props)]) + props + body
            crc = zlib.crc32(data, crc)
            d = z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)
            assert d.endswith(b'\x00\x00\xff\xff')
            out.append(bytes([n, 0x08]) + d[:-4] + struct.pack('>I', crc))
        with open(sys.argv[2], 'wb') as f:
            for frame in out:
                f.write(struct.pack('>I', len(frame)) + bytes(frame))
        """#

    static func lengthPrefixed(_ frames: [[UInt8]]) -> [UInt8] {
        frames.flatMap { f in
            [
                UInt8(truncatingIfNeeded: f.count >> 24), UInt8(truncatingIfNeeded: f.count >> 16),
                UInt8(truncatingIfNeeded: f.count >> 8), UInt8(truncatingIfNeeded: f.count),
            ] + f
        }
    }

    @Test func framesRoundTripWithPythonBLIP() throws {
        // Proves our framing, property blocks, running checksum and shared deflate context are what another
        // implementation reads, and the reverse: pythonblip reads four of our messages (two compressed through one
        // context, one with an empty body) with every checksum passing, and BLIPConnection reads pythonblip's frames
        // (including its lone-NUL empty property block) and two spec-style compressed frames sharing a context.
        guard FileManager.default.isExecutableFile(atPath: Self.python.path) else {
            Issue.record("needs .build-py/venv with pythonblip==0.3.1 (make deps / scripts/python-deps.sh)")
            return
        }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("blip-interop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let ours = dir.appendingPathComponent("ours.bin")
        let theirs = dir.appendingPathComponent("theirs.bin")
        let scriptFile = dir.appendingPathComponent("interop.py")
        try Data(Self.script.utf8).write(to: scriptFile)

        var out = BLIPConnection()
        let json = Array(String(repeating: #"{"a":1},"#, count: 1000).utf8)
        try out.enqueue(BLIPMessage(properties: [("Profile", "changes")], body: Array(#"[[1,"doc","1-a"]]"#.utf8)))
        try out.enqueue(BLIPMessage(compressed: true, properties: [("Profile", "rev"), ("id", "d1")], body: json))
        try out.enqueue(BLIPMessage(compressed: true, properties: [("Profile", "rev"), ("id", "d2")], body: json))
        try out.enqueue(BLIPMessage(properties: [("Profile", "norev"), ("é", "漢字")]))
        var frames: [[UInt8]] = []
        while let f = out.nextFrame() { frames.append(f) }
        try Data(Self.lengthPrefixed(frames)).write(to: ours)

        let process = Process()
        process.executableURL = Self.python
        process.arguments = [scriptFile.path, ours.path, theirs.path]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(output)")
        let lines = output.split(separator: "\n").filter { $0.hasPrefix("READ") }.map(String.init)
        #expect(
            lines == [
                "READ 1 0 0 Profile=changes 17 " + Array(#"[[1,"doc","1-a"]]"#.utf8).map { hex($0) }.joined(),
                "READ 2 0 1 Profile=rev,id=d1 8000 ",
                "READ 3 0 1 Profile=rev,id=d2 8000 ",
                "READ 4 0 0 Profile=norev,é=漢字 0 ",
            ], "\(output)")

        let data = try [UInt8](Data(contentsOf: theirs))
        var connection = BLIPConnection()
        var got: [BLIPMessage] = []
        var i = 0
        while i + 4 <= data.count {
            let n = Int(data[i]) << 24 | Int(data[i + 1]) << 16 | Int(data[i + 2]) << 8 | Int(data[i + 3])
            got += try connection.receive(frame: Array(data[(i + 4)..<min(data.count, i + 4 + n)]))
            i += 4 + n
        }
        #expect(got.map(\.number) == [1, 2, 3, 4, 5])
        #expect(got.first?["batch"] == "200" && got.first?.profile == "subChanges")
        #expect(got[2].properties.isEmpty && got[2].body == Array("[1,2,3]".utf8))
        #expect(got[3].compressed && got[3].profile == "rev" && got[3].body.count == 8 + 6 * 2000 + 2)
        #expect(got[4].body.last == UInt8(ascii: "}") && got[4].body.dropLast().last == UInt8(ascii: "1"))
    }

    func hex(_ b: UInt8) -> String {
        let s = String(b, radix: 16)
        return s.count == 1 ? "0" + s : s
    }
}
