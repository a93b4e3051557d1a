/*
 * A source coordinator's checkpoint bytes, read and written by Flink's own SourceCoordinator code.
 *
 * Flink keeps a FLIP-27 source's enumerator state in the operator's coordinator state as
 * SourceCoordinator.writeCheckpointBytes writes it (a serde version, the enumerator serializer's
 * version, the serialized enumerator checkpoint). Those helpers are package-private, so this
 * class lives in their package: Ferry calls Flink's code rather than re-implementing its format.
 */
package org.apache.flink.runtime.source.coordinator;

import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.IOException;

import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.core.memory.DataInputViewStreamWrapper;

public final class FerryCoordinatorBytes {
    private FerryCoordinatorBytes() {}

    /** The enumerator checkpoint in a source coordinator's bytes (SourceCoordinator's reader). */
    public static <T> T readEnumeratorState(byte[] bytes, SimpleVersionedSerializer<T> serializer)
            throws IOException {
        try (ByteArrayInputStream bais = new ByteArrayInputStream(bytes);
                DataInputStream in = new DataInputViewStreamWrapper(bais)) {
            int serdeVersion = SourceCoordinatorSerdeUtils.readAndVerifyCoordinatorSerdeVersion(in);
            int enumeratorVersion = in.readInt();
            byte[] enumerator = SourceCoordinatorSerdeUtils.readBytes(in, in.readInt());
            if (serdeVersion != SourceCoordinatorSerdeUtils.VERSION_0 && bais.available() > 0) {
                throw new IOException("trailing bytes after the enumerator checkpoint");
            }
            return serializer.deserialize(enumeratorVersion, enumerator);
        }
    }

    /** The bytes SourceCoordinator itself writes for this enumerator checkpoint. */
    public static <T> byte[] writeEnumeratorState(T state, SimpleVersionedSerializer<T> serializer)
            throws Exception {
        return SourceCoordinator.writeCheckpointBytes(state, serializer);
    }
}
