"""The controller's public gRPC APIs: the Admin and BrokerLifecycle services, their
conversions to the control managers' values, the seam to the controller
(``seam.ControllerFacade``), and the synchronous admin client used by the CLI."""
