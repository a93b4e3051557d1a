// A Spark Connect server interceptor (spark.connect.grpc.interceptor.classes) that gives PySpark's
// own server the limits Ferry meets on Databricks serverless, for tests
// (ferry.testing.connect_server, limits=True):
// - caching refused: an AnalyzePlan persist or unpersist ends in NOT_SUPPORTED_WITH_SERVERLESS;
// - settings it will not say: reading spark.app.id, spark.sql.extensions or any spark.databricks.*
//   setting ends in CONFIG_NOT_AVAILABLE;
// - spark.sql.shuffle.partitions read as `auto` (the server still runs with its own number:
//   PySpark's SQLConf takes only an integer there).
// Compiled by connect_server against the spark-connect jar of the installed PySpark (its gRPC
// and protobuf are shaded under org.sparkproject.connect).
package ferry.testing;

import org.apache.spark.connect.proto.AnalyzePlanRequest;
import org.apache.spark.connect.proto.ConfigRequest;
import org.apache.spark.connect.proto.ConfigResponse;
import org.apache.spark.connect.proto.KeyValue;
import org.sparkproject.connect.grpc.ForwardingServerCall;
import org.sparkproject.connect.grpc.ForwardingServerCallListener;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;

import java.util.ArrayList;
import java.util.List;

public class ServerlessLimits implements ServerInterceptor {
  static final String SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions";

  static boolean refusedSetting(String key) {
    return key.equals("spark.app.id") || key.equals("spark.sql.extensions")
        || key.startsWith("spark.databricks.");
  }

  static String refusal(Object request) {
    if (request instanceof AnalyzePlanRequest) {
      AnalyzePlanRequest analyze = (AnalyzePlanRequest) request;
      if (analyze.hasPersist() || analyze.hasUnpersist()) {
        return "[NOT_SUPPORTED_WITH_SERVERLESS] PERSIST TABLE is not supported on serverless"
            + " compute. SQLSTATE: 0A000";
      }
    }
    if (request instanceof ConfigRequest) {
      ConfigRequest.Operation op = ((ConfigRequest) request).getOperation();
      List<String> keys = new ArrayList<>();
      if (op.hasGet()) keys.addAll(op.getGet().getKeysList());
      if (op.hasGetOption()) keys.addAll(op.getGetOption().getKeysList());
      if (op.hasGetWithDefault()) {
        for (KeyValue kv : op.getGetWithDefault().getPairsList()) keys.add(kv.getKey());
      }
      for (String key : keys) {
        if (refusedSetting(key)) {
          return "[CONFIG_NOT_AVAILABLE] Configuration " + key + " is not available."
              + " SQLSTATE: 42K0I";
        }
      }
    }
    return null;
  }

  static Object rewritten(Object response) {
    if (!(response instanceof ConfigResponse)) return response;
    ConfigResponse.Builder builder = ((ConfigResponse) response).toBuilder();
    for (int i = 0; i < builder.getPairsCount(); i++) {
      KeyValue kv = builder.getPairs(i);
      if (kv.getKey().equals(SHUFFLE_PARTITIONS) && kv.hasValue()) {
        builder.setPairs(i, kv.toBuilder().setValue("auto").build());
      }
    }
    return builder.build();
  }

  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(
      ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
    ServerCall<Q, R> rewriting = new ForwardingServerCall.SimpleForwardingServerCall<Q, R>(call) {
      @Override
      @SuppressWarnings("unchecked")
      public void sendMessage(R message) {
        super.sendMessage((R) rewritten(message));
      }
    };
    ServerCall.Listener<Q> listener = next.startCall(rewriting, headers);
    return new ForwardingServerCallListener.SimpleForwardingServerCallListener<Q>(listener) {
      private boolean refused = false;

      @Override
      public void onMessage(Q message) {
        String why = refusal(message);
        if (why != null) {
          refused = true;
          System.err.println("ServerlessLimits refused: " + why);
          call.close(Status.INVALID_ARGUMENT.withDescription(why), new Metadata());
          return;
        }
        super.onMessage(message);
      }

      @Override
      public void onHalfClose() {
        if (!refused) super.onHalfClose();
      }
    };
  }
}
